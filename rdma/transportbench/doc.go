// Package transportbench measures the transport as the parameter server
// uses it: a push of a gradient followed by a pull of the same number of
// weights, over a real connection, for each transport, codec and size.
// Run returns one Row per combination; softsync bench transport prints
// them as a table or JSON.
//
// One round is: the client sends a message of Bytes/4 float32 values, the
// server receives it and sends it back in place (same codec, so a lossy
// codec's cost is paid in both directions), the client receives the reply.
// GBps counts gradient bytes pushed and pulled per second: 2·Bytes / round
// time / 1e9, the figure ps-lite and iperf3 comparisons use, taken from
// the median round (robust to other processes on a shared host); GBpsMean
// from the mean. Before each push of a lossy codec the client refills the
// payload with fresh gradient-like values (internal/synth: seeded
// Gaussian, σ = 1e-3, about one 500-value row in six all zero) outside the
// timed region, as a learner computes its gradient into the message. The
// optional baseline row ("tcp-raw") moves the same bytes over a plain
// loopback socket with no framing, checksum or codec, measured in the same
// run as a ceiling for TCP. The verbs transport runs over the host's RDMA
// device ("verbs"), or over its in-process emulation ("verbs-emu"), whose
// rows are marked Emulated: they measure the protocol and memory copies,
// not RDMA hardware. Row.Conn is the transport each connection used (what
// "auto" chose).
package transportbench
