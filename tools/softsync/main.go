package main

import (
	"errors"
	"fmt"
	"os"
)

func main() {
	if err := newRootCmd(os.Stdout).Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "softsync:", err)
		var es exitStatus
		if errors.As(err, &es) { // launch: the head's status
			os.Exit(es.code)
		}
		os.Exit(1)
	}
}
