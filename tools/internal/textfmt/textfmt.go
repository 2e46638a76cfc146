// Package textfmt formats the figures softsync shows people: counts with
// thousands separators, durations, byte counts and buffer sizes. The
// binary's summaries and the harnesses' tables (tools/bench, tools/repro)
// share it, so that a figure reads the same everywhere.
package textfmt

import (
	"fmt"
	"strings"
	"time"
)

// Thousands formats n with thousands separators: 1,234,567.
func Thousands(n int64) string {
	s := fmt.Sprint(n)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// Bytes formats a byte count in decimal units: "1.50 GB", "12.3 MB",
// "512 bytes".
func Bytes(n uint64) string {
	switch {
	case n >= 1e9:
		return fmt.Sprintf("%.2f GB", float64(n)/1e9)
	case n >= 1e6:
		return fmt.Sprintf("%.1f MB", float64(n)/1e6)
	}
	return fmt.Sprintf("%d bytes", n)
}

// Size formats a power-of-two buffer size as KiB or MiB.
func Size(n int) string {
	if n >= 1<<20 && n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}

// Duration formats sec seconds to a precision that fits its length:
// whole seconds from a minute, hundredths from a second, microseconds
// below.
func Duration(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d >= time.Minute:
		return d.Round(time.Second).String()
	case d >= time.Second:
		return d.Round(10 * time.Millisecond).String()
	}
	return d.Round(time.Microsecond).String()
}
