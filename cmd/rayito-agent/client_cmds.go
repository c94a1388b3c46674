package main

import (
	"fmt"
	"os"
)

func execCmd(args []string) int {
	fmt.Fprintln(os.Stderr, "rayito-agent exec: not yet available")
	return 2
}

func healthCmd(args []string) int {
	fmt.Fprintln(os.Stderr, "rayito-agent health: not yet available")
	return 2
}
