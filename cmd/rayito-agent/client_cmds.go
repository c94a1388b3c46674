package main

import (
	"os"
)

func execCmd(args []string) int {
	return runExec(args, os.Stdin, os.Stdout, os.Stderr)
}

func healthCmd(args []string) int {
	return runHealth(args, os.Stdout, os.Stderr)
}
