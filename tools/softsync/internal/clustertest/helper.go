package clustertest

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
)

// helperFlag is the first argument of a test binary started by Self.
const helperFlag = "-clustertest.helper"

// Main is a TestMain body that also lets the test binary serve as the
// program the launchers start: when the binary was started with the
// command line that Self builds, Main runs that helper with its arguments
// and exits with its status; otherwise it runs the tests.
//
//	func TestMain(m *testing.M) {
//		clustertest.Main(m, map[string]func(args []string) int{
//			"worker": workerMain,
//		})
//	}
func Main(m *testing.M, helpers map[string]func(args []string) int) {
	if len(os.Args) >= 3 && os.Args[1] == helperFlag {
		fn, ok := helpers[os.Args[2]]
		if !ok {
			names := make([]string, 0, len(helpers))
			for n := range helpers {
				names = append(names, n)
			}
			sort.Strings(names)
			fmt.Fprintf(os.Stderr, "clustertest: no helper %q (have %s)\n", os.Args[2], strings.Join(names, ", "))
			os.Exit(2)
		}
		os.Exit(fn(os.Args[3:]))
	}
	os.Exit(m.Run())
}

// Self returns the command line that runs helper name of the running test
// binary (registered with Main) with args: a Spec.Argv for any launcher.
func Self(name string, args ...string) []string {
	exe, err := os.Executable()
	if err != nil {
		panic(fmt.Sprintf("clustertest: the test binary's path: %v", err))
	}
	return append([]string{exe, helperFlag, name}, args...)
}
