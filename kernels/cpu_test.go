package kernels

import (
	"slices"
	"testing"
)

func TestChooseCore(t *testing.T) {
	avx512 := []string{"AVX", "AVX2", "FMA3", "AVX512F", "AVX512BW", "AVX512DQ", "AVX512VL", "AVX512CD"}
	cases := []struct {
		name, vendor string
		features     []string
		avail        []string
		want         string
	}{
		{"Skylake-SP Xeon", "Intel", avx512, nil, "SKYLAKEX"},
		{"Cooper Lake", "Intel", append(slices.Clone(avx512), "AVX512BF16"), nil, "COOPERLAKE"},
		{"Sapphire Rapids, old library", "Intel", append(slices.Clone(avx512), "AVX512BF16", "AMXTILE", "AMXBF16"), nil, "COOPERLAKE"},
		{"Sapphire Rapids", "Intel", append(slices.Clone(avx512), "AVX512BF16", "AMXTILE", "AMXBF16"),
			[]string{"HASWELL", "SKYLAKEX", "COOPERLAKE", "SAPPHIRERAPIDS"}, "SAPPHIRERAPIDS"},
		{"AVX-512 without the library's core", "Intel", avx512, []string{"HASWELL", "SANDYBRIDGE"}, "HASWELL"},
		{"Zen 3", "AMD", []string{"AVX", "AVX2", "FMA3"}, nil, "ZEN"},
		{"Haswell", "Intel", []string{"AVX", "AVX2", "FMA3"}, nil, "HASWELL"},
		{"AVX2 without FMA", "Intel", []string{"AVX", "AVX2"}, nil, "SANDYBRIDGE"},
		{"Sandy Bridge", "Intel", []string{"AVX"}, nil, "SANDYBRIDGE"},
		{"SSE only", "Intel", []string{"SSE2", "SSE3"}, nil, ""},
	}
	for _, c := range cases {
		got, reason := ChooseCore(NewCPU(c.name, c.vendor, c.features), c.avail)
		if got != c.want || reason == "" {
			t.Errorf("%s: ChooseCore = %q (%s), want %q", c.name, got, reason, c.want)
		}
	}
}

func TestLowerCoreAndMissing(t *testing.T) {
	var chain []string
	for c := "SAPPHIRERAPIDS"; c != ""; c = LowerCore(c) {
		chain = append(chain, c)
	}
	want := []string{"SAPPHIRERAPIDS", "COOPERLAKE", "SKYLAKEX", "HASWELL", "SANDYBRIDGE"}
	if !slices.Equal(chain, want) || LowerCore("zen") != "HASWELL" {
		t.Errorf("LowerCore chain %v, want %v then ZEN → HASWELL", chain, want)
	}
	zen3 := NewCPU("Zen 3", "AMD", []string{"AVX", "AVX2", "FMA3"})
	if m := MissingFeatures(zen3, "SkylakeX"); !slices.Equal(m, []string{"AVX512F", "AVX512BW", "AVX512DQ", "AVX512VL"}) {
		t.Errorf("MissingFeatures(Zen 3, SkylakeX) = %v", m)
	}
	if m := MissingFeatures(zen3, "HASWELL"); m != nil {
		t.Errorf("MissingFeatures(Zen 3, HASWELL) = %v, want none", m)
	}
}

func TestHalfRate512(t *testing.T) {
	avx512 := []string{"AVX2", "FMA3", "AVX512F", "AVX512BW", "AVX512DQ", "AVX512VL"}
	for _, c := range []struct {
		vendor   string
		family   int
		features []string
		want     bool
	}{
		{"AMD", 25, avx512, true},                    // Zen 4
		{"AMD", 25, []string{"AVX2", "FMA3"}, false}, // Zen 3
		{"AMD", 26, avx512, false},                   // Zen 5
		{"Intel", 6, avx512, false},                  // Skylake-SP and later
		{"AMD", 0, avx512, false},                    // unknown family
	} {
		cpu := NewCPU("", c.vendor, c.features)
		cpu.Family = c.family
		if got := cpu.HalfRate512(); got != c.want {
			t.Errorf("%s family %d %v: HalfRate512 = %v, want %v", c.vendor, c.family, c.features, got, c.want)
		}
	}
}
