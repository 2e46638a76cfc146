package launcher

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestExpandNodeList(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"localhost", []string{"localhost"}},
		{"a,b,c", []string{"a", "b", "c"}},
		{"node[01-04,07],gpu-a[1-2]", []string{"node01", "node02", "node03", "node04", "node07", "gpu-a1", "gpu-a2"}},
		{"n[8-11]", []string{"n8", "n9", "n10", "n11"}},
		{"n[08-11]", []string{"n08", "n09", "n10", "n11"}},
		{"n[098-101]", []string{"n098", "n099", "n100", "n101"}},
		{"n[0-2]", []string{"n0", "n1", "n2"}},
		{"n[00-02]", []string{"n00", "n01", "n02"}},
		{"n[5]", []string{"n5"}},
		{"n[007]", []string{"n007"}},
		{"[1-2]", []string{"1", "2"}},
		{"rack[1-2]-node[01-02]", []string{"rack1-node01", "rack1-node02", "rack2-node01", "rack2-node02"}},
		{"r[1-2]n[3,5]x", []string{"r1n3x", "r1n5x", "r2n3x", "r2n5x"}},
		{"a[1-2],b,c[3]", []string{"a1", "a2", "b", "c3"}},
		{"node-1.example.org,node-2.example.org", []string{"node-1.example.org", "node-2.example.org"}},
		{"n[1-2],n[1-2]", []string{"n1", "n2", "n1", "n2"}},
	} {
		got, err := ExpandNodeList(tc.in)
		if err != nil {
			t.Errorf("ExpandNodeList(%q): %v", tc.in, err)
			continue
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ExpandNodeList(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestExpandNodeListErrors(t *testing.T) {
	for _, in := range []string{
		"n[1-2", "n1-2]", "n[[1]]", "n[]", "n[1-]", "n[-1]", "n[3-1]", "n[a-b]",
		"n[1,,2]", "a,,b", ",a", "a,", "n[1-2]]", "n[1 -2]", "n[0-99999999]",
		"n[0-255]m[0-255]x[0-1]", "n[99999999999]",
	} {
		got, err := ExpandNodeList(in)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("ExpandNodeList(%q) = %q, %v; want an error wrapping ErrInvalid", in, got, err)
		} else if !strings.Contains(err.Error(), in) {
			t.Errorf("ExpandNodeList(%q): error %q does not quote the list", in, err)
		}
	}
}

func TestExpandNodeListLimit(t *testing.T) {
	got, err := ExpandNodeList("n[00001-65536]")
	if err != nil || len(got) != MaxNodes || got[0] != "n00001" || got[MaxNodes-1] != "n65536" {
		t.Fatalf("MaxNodes names: %d names, %v", len(got), err)
	}
	if _, err := ExpandNodeList("n[00001-65536],m"); !errors.Is(err, ErrInvalid) {
		t.Fatalf("MaxNodes+1 names: %v, want ErrInvalid", err)
	}
}

func TestExpandTasksPerNode(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{
		{"", nil},
		{"4", []int{4}},
		{"2(x3),1", []int{2, 2, 2, 1}},
		{"1,2(x2),3", []int{1, 2, 2, 3}},
		{"16(x1)", []int{16}},
	} {
		got, err := ExpandTasksPerNode(tc.in)
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ExpandTasksPerNode(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, in := range []string{"x", "2(3)", "2(x)", "2(x0)", "2(x2", ",", "1,,2", "-1", "2(x99999999)"} {
		if got, err := ExpandTasksPerNode(in); !errors.Is(err, ErrInvalid) {
			t.Errorf("ExpandTasksPerNode(%q) = %v, %v; want ErrInvalid", in, got, err)
		}
	}
}

func FuzzExpandNodeList(f *testing.F) {
	for _, s := range []string{"node[01-04,07],gpu-a[1-2]", "r[1-2]n[3,5]x", "a,b", "n[1-2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		nodes, err := ExpandNodeList(s)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%q: error %v does not wrap ErrInvalid", s, err)
			}
			return
		}
		if len(nodes) > MaxNodes {
			t.Fatalf("%q: %d nodes", s, len(nodes))
		}
		for _, n := range nodes {
			if n == "" || strings.ContainsAny(n, "[],") {
				t.Fatalf("%q: bad name %q", s, n)
			}
		}
	})
}
