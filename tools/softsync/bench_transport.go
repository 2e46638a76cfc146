package main

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/rdma"
	"github.com/softsync/softsync/rdma/transportbench"
)

func init() { addBenchCommand(newBenchTransportCmd) }

func newBenchTransportCmd(app *App) *cobra.Command {
	var asJSON, baseline bool
	var transports, codecs, sizes string
	var minTime time.Duration
	c := &cobra.Command{
		Use:   "transport",
		Short: "Push+pull round trips per transport, codec and gradient size",
		Long: `Each round pushes a gradient of the given size to an echo server, which
sends it back as the pulled weights; gbps counts gradient bytes pushed
and pulled per second (2·size / median round time / 1e9; gbps_mean uses
the mean). ratio is wire bytes /
raw bytes, encode_s and decode_s the codec time per round (both
directions). The tcp-raw row (--baseline) moves the same bytes over a
plain loopback socket, with no framing, checksum or codec, in the same
run, and the memcpy row copies them as shm does (into a ring-sized
buffer and out, each way) on one core, with nothing else: the ceilings
of tcp and shm. tcp-nocrc runs without payload checksums; shm is shared
memory between processes of one host (never payload-checksummed). verbs needs an RDMA
device (softsync doctor lists them; docs/rdma.md shows Soft-RoCE);
verbs-emu runs the verbs transport over its in-process emulation, whose
rows are labelled emulated: they measure the protocol and memory copies,
not RDMA hardware. auto picks shm, verbs or TCP per connection as
softsync train would, and the "via" column (conn in JSON, with the
reason) says which.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg := transportbench.Config{MinTime: minTime, Baseline: baseline, Seed: 1, OnConnect: app.logConnect}
			cfg.Transports = strings.Split(transports, ",")
			for _, name := range cfg.Transports {
				if !slices.Contains(transportbench.TransportNames(), name) {
					return fmt.Errorf("--transports: unknown transport %q (%s)", name, strings.Join(transportbench.TransportNames(), ", "))
				}
			}
			for _, name := range strings.Split(codecs, ",") {
				codec, err := rdma.ParseCodec(name)
				if err != nil {
					return fmt.Errorf("--codecs: %w", err)
				}
				cfg.Codecs = append(cfg.Codecs, codec)
			}
			for _, s := range strings.Split(sizes, ",") {
				n, err := parseByteSize(s)
				if err == nil && n%4 != 0 {
					err = fmt.Errorf("size %q is not a whole number of float32 values (a multiple of 4 bytes)", s)
				}
				if err != nil {
					return fmt.Errorf("--sizes: %w", err)
				}
				cfg.Sizes = append(cfg.Sizes, n)
			}
			rows, err := transportbench.Run(cmd.Context(), cfg, func(r transportbench.Row) {
				app.Log.Debug("transport", "transport", r.Transport, "via", r.Conn, "emulated", r.Emulated, "codec", r.Codec, "bytes", r.Bytes, "gbps", r.GBps)
			})
			if err != nil {
				return err
			}
			if asJSON {
				return app.printJSON(rows)
			}
			w := tabwriter.NewWriter(app.Out, 0, 0, 2, ' ', tabwriter.AlignRight)
			fmt.Fprintf(w, "transport\tvia\tcodec\tbytes\tGB/s\tGB/s mean\tratio\twire MB/round\tencode ms\tdecode ms\trounds\t\n")
			for _, r := range rows {
				via := r.Conn
				if r.Emulated {
					via += " (emulated)"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%.3f\t%.3f\t%.3f\t%.2f\t%.2f\t%.2f\t%d\t\n", r.Transport, via, r.Codec, r.Bytes,
					r.GBps, r.GBpsMean, r.Ratio, r.WireBytes/1e6, 1e3*r.EncodeSec, 1e3*r.DecodeSec, r.Rounds)
			}
			return w.Flush()
		},
	}
	f := c.Flags()
	f.BoolVar(&asJSON, "json", false, "print a JSON array of {transport, codec, bytes, gbps, ratio, ...}")
	f.StringVar(&transports, "transports", "inmem,tcp,shm", "comma-separated transports: inmem, tcp, tcp-nocrc, shm, verbs, verbs-emu (emulated verbs), auto")
	f.StringVar(&codecs, "codecs", "none,s2,zstd,shuffle+s2,shuffle+zstd,fp16,bf16,topk:0.01", "comma-separated --compress values")
	f.StringVar(&sizes, "sizes", "1M,4M,16M", "comma-separated gradient sizes in bytes (K and M suffixes are ×1024)")
	f.DurationVar(&minTime, "min-time", time.Second, "minimum timed duration per row")
	f.BoolVar(&baseline, "baseline", true, "add a plain loopback socket row (tcp-raw) and a plain copy row (memcpy) per size")
	return c
}

// parseByteSize reads "4096", "64K" or "16M" (binary multiples).
func parseByteSize(s string) (int, error) {
	s = strings.TrimSpace(s)
	num, mult := s, 1
	switch {
	case strings.HasSuffix(s, "K"):
		num, mult = strings.TrimSuffix(s, "K"), 1<<10
	case strings.HasSuffix(s, "M"):
		num, mult = strings.TrimSuffix(s, "M"), 1<<20
	}
	n, err := strconv.Atoi(num)
	if err != nil || n <= 0 || n > math.MaxInt32/mult {
		return 0, fmt.Errorf("size %q is not a positive number of bytes below 2 GiB", s)
	}
	return n * mult, nil
}

// logConnect logs the transport a verbs or auto connection uses and why
// (rdma.Options.OnConnect): at info level the first time a peer is seen on
// each transport, at debug level afterwards, and a connection that could
// not be set up as a warning.
func (app *App) logConnect(local, remote string, t rdma.TransportInfo, err error) {
	if err != nil {
		app.Log.Warn("connection failed", "local", local, "peer", remote, "err", err)
		return
	}
	key := t.Name + " " + t.Reason
	app.connMu.Lock()
	seen := app.connSeen[key]
	if app.connSeen == nil {
		app.connSeen = map[string]bool{}
	}
	app.connSeen[key] = true
	app.connMu.Unlock()
	level := slog.LevelInfo
	if seen {
		level = slog.LevelDebug
	}
	app.Log.Log(context.Background(), level, "transport", "local", local, "peer", remote,
		"transport", t.Name, "emulated", t.Emulated, "device", t.Device, "reason", t.Reason)
}
