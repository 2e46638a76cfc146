package launcher

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxNodes bounds the number of names ExpandNodeList produces, so that a
// malformed or hostile range such as "n[0-999999999]" is an error rather
// than an allocation of gigabytes.
const MaxNodes = 1 << 16

// ExpandNodeList expands a Slurm host list in its compressed form, as found
// in SLURM_JOB_NODELIST and SLURM_STEP_NODELIST, into the node names in
// Slurm's order.
//
// The list is a comma-separated sequence of host expressions; commas inside
// brackets separate ranges instead. A host expression is literal text with
// any number of bracket groups, and each group holds comma-separated
// numbers or lo-hi ranges. A number written with a leading zero fixes the
// width of the whole range: "n[08-10]" is n08 n09 n10, while "n[8-10]" is n8
// n9 n10. Several groups in one expression give every combination, the
// leftmost group varying slowest: "r[1-2]n[1-2]" is r1n1 r1n2 r2n1 r2n2.
//
// An empty list gives nil. Unbalanced or nested brackets, empty elements,
// ranges whose high end is below the low end, non-digits inside brackets
// and lists longer than MaxNodes are errors wrapping ErrInvalid.
func ExpandNodeList(list string) ([]string, error) {
	if list == "" {
		return nil, nil
	}
	exprs, err := splitTop(list)
	if err != nil {
		return nil, fmt.Errorf("launcher: node list %q: %w", list, err)
	}
	var nodes []string
	for _, e := range exprs {
		if e == "" {
			return nil, fmt.Errorf("launcher: node list %q: empty host expression: %w", list, ErrInvalid)
		}
		nodes, err = expandExpr(nodes, e)
		if err != nil {
			return nil, fmt.Errorf("launcher: node list %q: %w", list, err)
		}
		if len(nodes) > MaxNodes {
			return nil, fmt.Errorf("launcher: node list %q: more than %d nodes: %w", list, MaxNodes, ErrInvalid)
		}
	}
	return nodes, nil
}

// splitTop splits s at the commas outside brackets and checks that
// brackets are balanced and not nested.
func splitTop(s string) ([]string, error) {
	var parts []string
	depth, start := 0, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '[':
			if depth > 0 {
				return nil, fmt.Errorf("nested '[' at byte %d: %w", i, ErrInvalid)
			}
			depth++
		case ']':
			if depth == 0 {
				return nil, fmt.Errorf("unmatched ']' at byte %d: %w", i, ErrInvalid)
			}
			depth--
		case ',':
			if depth == 0 {
				parts = append(parts, s[start:i])
				start = i + 1
			}
		}
	}
	if depth > 0 {
		return nil, fmt.Errorf("unclosed '[': %w", ErrInvalid)
	}
	return append(parts, s[start:]), nil
}

// expandExpr appends the names of one host expression (no top-level
// commas, balanced brackets) to nodes.
func expandExpr(nodes []string, expr string) ([]string, error) {
	// names holds the expansions of the prefix read so far.
	names := []string{""}
	for expr != "" {
		open := strings.IndexByte(expr, '[')
		if open < 0 {
			names = appendSuffix(names, expr)
			break
		}
		names = appendSuffix(names, expr[:open])
		end := open + strings.IndexByte(expr[open:], ']')
		values, err := expandRanges(expr[open+1 : end])
		if err != nil {
			return nil, fmt.Errorf("%q: %w", expr, err)
		}
		if len(nodes)+len(names)*len(values) > MaxNodes {
			return nil, fmt.Errorf("more than %d nodes: %w", MaxNodes, ErrInvalid)
		}
		next := make([]string, 0, len(names)*len(values))
		for _, n := range names {
			for _, v := range values {
				next = append(next, n+v)
			}
		}
		names = next
		expr = expr[end+1:]
	}
	return append(nodes, names...), nil
}

func appendSuffix(names []string, suffix string) []string {
	if suffix == "" {
		return names
	}
	for i := range names {
		names[i] += suffix
	}
	return names
}

// expandRanges expands the inside of one bracket group: "01-04,07".
func expandRanges(group string) ([]string, error) {
	if group == "" {
		return nil, fmt.Errorf("empty brackets: %w", ErrInvalid)
	}
	var out []string
	for _, r := range strings.Split(group, ",") {
		loS, hiS, isRange := strings.Cut(r, "-")
		if !isRange {
			hiS = loS
		}
		lo, err := parseDigits(loS)
		if err != nil {
			return nil, fmt.Errorf("range %q: %w", r, err)
		}
		hi, err := parseDigits(hiS)
		if err != nil {
			return nil, fmt.Errorf("range %q: %w", r, err)
		}
		if hi < lo {
			return nil, fmt.Errorf("range %q runs backwards: %w", r, ErrInvalid)
		}
		if hi-lo >= MaxNodes || len(out)+int(hi-lo)+1 > MaxNodes {
			return nil, fmt.Errorf("range %q: more than %d nodes: %w", r, MaxNodes, ErrInvalid)
		}
		width := 0
		if len(loS) > 1 && loS[0] == '0' {
			width = len(loS)
		}
		for v := lo; v <= hi; v++ {
			out = append(out, fmt.Sprintf("%0*d", width, v))
		}
	}
	return out, nil
}

// parseDigits parses a non-empty run of ASCII digits.
func parseDigits(s string) (uint64, error) {
	if s == "" {
		return 0, fmt.Errorf("empty number: %w", ErrInvalid)
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return 0, fmt.Errorf("%q is not a number: %w", s, ErrInvalid)
		}
	}
	v, err := strconv.ParseUint(s, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%q: %w", s, ErrInvalid)
	}
	return v, nil
}

// ExpandTasksPerNode expands Slurm's compressed task counts per node, as in
// SLURM_TASKS_PER_NODE and SLURM_STEP_TASKS_PER_NODE: "2(x3),1" is
// [2 2 2 1]. An empty string gives nil; anything else that is not a list of
// counts with optional "(xN)" repeats is an error wrapping ErrInvalid.
func ExpandTasksPerNode(s string) ([]int, error) {
	if s == "" {
		return nil, nil
	}
	var out []int
	for _, part := range strings.Split(s, ",") {
		count, rep := part, "1"
		if i := strings.IndexByte(part, '('); i >= 0 {
			if !strings.HasPrefix(part[i:], "(x") || !strings.HasSuffix(part, ")") {
				return nil, fmt.Errorf("launcher: tasks per node %q: bad repeat %q: %w", s, part, ErrInvalid)
			}
			count, rep = part[:i], part[i+2:len(part)-1]
		}
		c, err := parseDigits(count)
		if err != nil {
			return nil, fmt.Errorf("launcher: tasks per node %q: %w", s, err)
		}
		r, err := parseDigits(rep)
		if err != nil {
			return nil, fmt.Errorf("launcher: tasks per node %q: %w", s, err)
		}
		if r == 0 || len(out)+int(r) > MaxNodes {
			return nil, fmt.Errorf("launcher: tasks per node %q: repeat %d out of range: %w", s, r, ErrInvalid)
		}
		for ; r > 0; r-- {
			out = append(out, int(c))
		}
	}
	return out, nil
}
