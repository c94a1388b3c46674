#include "textflag.h"

// func rdrand64() (uint64, bool)
TEXT ·rdrand64(SB), NOSPLIT, $0-9
	RDRANDQ AX
	SETCS  BL
	MOVQ   AX, ret+0(FP)
	MOVB   BL, ret1+8(FP)
	RET

// func rdseed64() (uint64, bool)
TEXT ·rdseed64(SB), NOSPLIT, $0-9
	RDSEEDQ AX
	SETCS  BL
	MOVQ   AX, ret+0(FP)
	MOVB   BL, ret1+8(FP)
	RET
