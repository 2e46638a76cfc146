package isa

import (
	"fmt"
	"strings"
)

// Level is an instruction-set level of the kernels. Levels are ordered:
// a CPU that runs one runs every lower one. The zero value, Auto, stands
// for "the best level available" in configuration structs.
type Level uint8

const (
	// Auto asks for the best level available (Best).
	Auto Level = iota
	// Generic is portable code for the build's baseline target.
	Generic
	// AVX2 is 256-bit AVX2 with FMA (and F16C, which the fp16 codec uses).
	AVX2
	// AVX512 is 512-bit AVX-512 F, CD, BW, DQ and VL.
	AVX512
)

// All lists the concrete levels, best first.
var All = []Level{AVX512, AVX2, Generic}

var names = [...]string{Auto: "auto", Generic: "generic", AVX2: "avx2", AVX512: "avx512"}

// String returns the level's flag spelling: "auto", "generic", "avx2" or
// "avx512".
func (l Level) String() string {
	if int(l) < len(names) {
		return names[l]
	}
	return fmt.Sprintf("Level(%d)", uint8(l))
}

// Parse reads a level's flag spelling (case-insensitive; "" means Auto).
func Parse(s string) (Level, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if s == "" {
		return Auto, nil
	}
	for l, name := range names {
		if s == name {
			return Level(l), nil
		}
	}
	return Auto, fmt.Errorf("unknown instruction set %q (want auto, avx512, avx2 or generic)", s)
}

// Needs returns the CPU features (in the spelling of CPU feature lists:
// "AVX2", "FMA3", "AVX512F", ...) that the level's kernels use.
func (l Level) Needs() []string {
	switch l {
	case AVX2:
		return []string{"AVX", "AVX2", "FMA3", "F16C"}
	case AVX512:
		return []string{"AVX", "AVX2", "FMA3", "F16C", "AVX512F", "AVX512CD", "AVX512BW", "AVX512DQ", "AVX512VL"}
	}
	return nil
}

// Choose returns the highest level whose features has reports (has gets
// the names Needs lists) and that the build allows, and why. It is the
// decision Best makes for the running CPU, open to tests and to
// describing other machines.
func Choose(has func(feature string) bool) (Level, string) {
	for _, l := range All {
		if l == Generic {
			break
		}
		if l > buildMax {
			continue
		}
		ok := true
		for _, f := range l.Needs() {
			if !has(f) {
				ok = false
				break
			}
		}
		if ok {
			return l, "the CPU has " + strings.Join(l.Needs(), ", ") + belowBuild(l)
		}
	}
	if buildMax == Generic {
		return Generic, buildReason
	}
	return Generic, "the CPU lacks " + strings.Join(missing(AVX2, has), ", ") + ", which AVX2 needs"
}

// belowBuild explains a level below the CPU's best because of the build.
func belowBuild(l Level) string {
	if l == buildMax && buildMax < AVX512 {
		return " (" + buildReason + ")"
	}
	return ""
}

func missing(l Level, has func(string) bool) []string {
	var m []string
	for _, f := range l.Needs() {
		if !has(f) {
			m = append(m, f)
		}
	}
	return m
}

var best, bestReason = Choose(cpuHas)

// Best returns the highest level the running CPU, its operating system
// and this build support.
func Best() Level { return best }

// Reason says why Best is what it is, e.g. "the CPU has AVX, AVX2, ...".
func Reason() string { return bestReason }

// Cap returns the level to run when l is the highest allowed: Best() for
// Auto, otherwise the lower of l and Best().
func Cap(l Level) Level {
	if l == Auto {
		return best
	}
	return min(l, best)
}

// Supported reports whether l runs here (Auto always does).
func Supported(l Level) bool { return l <= best }

// Resolve turns a requested level into the level to run: Best for Auto,
// l itself when supported, otherwise an error that says what the CPU (or
// the build) lacks.
func Resolve(l Level) (Level, error) {
	switch {
	case l == Auto:
		return best, nil
	case l > AVX512:
		return 0, fmt.Errorf("unknown instruction set %v", l)
	case l <= best:
		return l, nil
	case l > buildMax:
		return 0, fmt.Errorf("instruction set %v: %s", l, buildReason)
	}
	return 0, fmt.Errorf("instruction set %v: this CPU (or its operating system) lacks %s", l, strings.Join(missing(l, cpuHas), ", "))
}
