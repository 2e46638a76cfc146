// Package verbs is the seam between softsync's verbs transport (package
// rdma) and the InfiniBand/RoCE verbs: a small interface (Provider,
// Context, PD, MR, CQ, QP) over the operations the transport uses —
// device listing and queries, protection domain, memory registration,
// completion queue with its completion channel, Reliable Connected queue
// pairs moved to RTR and RTS, posting SEND, RDMA WRITE (WITH IMMEDIATE)
// and receives, and polling — with two implementations:
//
//   - Host: libibverbs through cgo, over the thin C99 layer in
//     csrc/verbs/ (compiled into this package by csrc.c under the verbs
//     build tag; libibverbs.so.1 is loaded with dlopen, so a binary runs,
//     and reports verbs as unsupported, where it is missing). Without the
//     tag, or without cgo, Host returns ErrNotBuilt.
//   - Emu: an in-process emulation reproducing the semantics the
//     transport relies on (ordering, immediate data, key and bounds
//     checks, receiver not ready, error states and flushes, queue depths,
//     completion events, the locked-memory limit), with hooks that inject
//     faults. The transport's protocol, conformance suite included, is
//     tested over it on hosts without RDMA.
//
// Memory handed to RegMR lies outside the Go heap (mmap). The transport
// posts to a queue pair under its connection's lock and polls a
// completion queue from one goroutine; CQ.Wake may be called from any
// goroutine to release a Wait.
package verbs
