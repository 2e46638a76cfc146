// Package ps is the parameter server of softsync: the protocol core of one
// shard (a deterministic state machine), the sharding of the flat weight
// vector, the shard server that connects cores to a transport, and the
// learner side: its protocol core (another deterministic state machine)
// and the client that connects it to the transport. The solver update
// itself is package ps/sgd.
//
// # Shards
//
// The flat parameter vector of length T is split into Config.Shards
// contiguous ranges by Ranges: shard k owns [k·T/S, (k+1)·T/S), each
// boundary rounded down to a multiple of 16 floats (64 bytes, so shards
// never share a cache line) when T ≥ 16·S. Each shard has its own clock,
// momentum, accumulator, membership view and counters; shards never
// synchronise with each other (as in Rudra). A learner pulls every shard,
// remembers each shard's stamp, and pushes each shard its slice of the
// gradient stamped with that shard's stamp.
//
// # The core
//
// Shard is the protocol of one shard as a state machine in the style of
// etcd's raft: Step(Msg) consumes one message and returns a Ready batch of
// outputs (replies to send, updates applied). It has no goroutines, no
// clocks and no I/O; given the same messages it produces the same outputs
// and the same weights, bit for bit. The runtime (Server) and the
// simulator (ps/sim) drive the same core. The learner side has a core of
// its own, ClientCore (see "The client core").
//
// Messages: MsgPush carries (learner, sequence, stamp j, gradient slice);
// MsgPull asks for weights with stamp ≥ a minimum clock; MsgJoin and
// MsgLeave change membership. Every message names its job and shard.
//
// # Clock, staleness and the update
//
// The shard clock i starts at 0 and increases by one per update. A
// gradient computed on weights stamped j and accepted at clock i has
// staleness τ = i − j. A gradient accepted at clock i is applied by the
// update i → i+1 (the clock cannot advance without applying every pending
// gradient), so τ at acceptance is τ at application. Accepted gradients
// go straight into the solver's accumulator scaled by their learning-rate
// factor (see package sgd for the order of operations); an update combines
// the c pending gradients. λ below is always Config.Learners, the learners
// the job was configured with, never the number still active:
//
//   - Hardsync: the update happens when every active learner has pushed one
//     gradient stamped with the current clock; c is the number of them, c₀
//     = λ. τ is always 0: a gradient stamped j < i is dropped (counted in
//     Stats.Dropped), a second gradient from the same learner in one round
//     is rejected (ErrAlreadyPushed). A learner's pull after its push is
//     answered only once the update has happened, with the new weights,
//     whatever minimum clock it asked for.
//   - Softsync with n (1 ≤ n ≤ λ): the update happens as soon as c₀ =
//     max(1, ⌊λ/n⌋) gradients are pending, from any learners, with no
//     barrier. n = λ is fully asynchronous (c₀ = 1).
//
// # The n schedule
//
// With Config.NSchedule, softsync's n follows the epoch (sgd.NSchedule,
// "30@0,4@6,1@9"): c₀ = max(1, ⌊λ/n(e)⌋) with e = ⌊Samples/DataSize⌋, the
// epoch the step schedule uses. The shard recomputes c₀ whenever its
// sample count grows: after each update (applied or refused) and each
// dropped gradient, never while gradients are being collected into an
// update. Hence the update whose samples complete epoch e − 1 is
// collected and applied under the old c₀, and the first update that uses
// the new c₀ is the first update of epoch e (the first whose
// UpdateInfo epoch is e, as with the rate schedule): it combines the new
// c₀ gradients, counting from the first gradient accepted after the
// update that ended the epoch. If a dropped gradient ends the epoch while
// gradients are pending, they stay pending, and are applied in that Step
// when they already number the new c₀ or more. The solver divides by the
// c₀ of the update (sgd.Solver.SetQuorum), so a partial update is partial
// against the c₀ of its epoch. Hardsync ignores the schedule (c₀ = λ).
//
// # Pulled weights
//
// For the rules that compare a gradient with the weights it was computed
// on (sgd.Config.NeedsPulled: dc, dc-adaptive, gap), a softsync shard
// keeps a copy of the weights of its range that it served each learner,
// taken as it answers the pull, with the clock it served them at. A
// gradient stamped j is corrected with the learner's copy stamped j
// (within a life, the weights at a clock never change). A learner holds
// one copy, or two when it pulls again before pushing the gradient of its
// previous pull (a prefetch, or a pull repeated without a push): a new
// copy takes the place of one a gradient was accepted from, else a slot
// not yet allocated, else the older copy. Copies are allocated when first
// needed and kept across a leave and a rejoin. A gradient of τ = 0 is
// computed on the current weights; one whose copy the shard does not hold
// (a checkpoint written without copies) is taken as computed on the
// current weights, uncorrected. Memory: at most 2λ copies of the shard's
// range, λ for learners that do not prefetch (Stats.PulledBytes); none
// for the other rules, and none under hardsync, where every accepted
// gradient has τ = 0. The copies are part of the shard's checkpoint.
//
// # Membership and partial updates
//
// Learner ids are 0 … Config.Learners−1 and all are active at start.
// MsgLeave deactivates a learner (at the end of its data, or lost: the
// runtime turns a lost connection into MsgLeave); MsgJoin reactivates one
// (ids outside the range are unknown). Gradients already accepted from a
// learner that leaves stay in the pending update.
//
// The rule for membership changes: c₀ (Config.Quorum) never follows the
// active learners. Softsync keeps waiting for c₀ gradients from whoever is
// left. An update that holds fewer, c < c₀ gradients — a hardsync round
// completed by a leave (every remaining active learner has pushed), or the
// pending gradients applied when the last active learner leaves — is a
// partial update: the solver divides by c₀ instead of c (sgd.Config.Quorum),
// so its rate is scaled by c/c₀ and each gradient keeps the weight it has
// in a full update. A partial update is applied in the Step of the leave
// that completes it and counted in Stats.Partial. Hence learners that
// finish or fail one by one never turn the last updates of a job into
// full-rate steps on fewer gradients: with c = ⌊λa/n⌋ (λa the active
// learners), the last learner alone would make full-rate updates from
// single mini-batches, √c₀ times noisier than the rest of the job.
//
// # Bounded staleness
//
// With Config.MaxStaleness = S ≥ 1 (softsync only):
//
//   - Drop rule (every shard): a gradient with τ > S is dropped: counted in
//     Stats.Dropped, never applied.
//   - Pull rule (shard 0 only, the gate): a learner is "computing" from
//     the moment shard 0 answers a pull of its with weights stamped h until
//     it pushes, pulls again or leaves; a learner blocked in a pull, or
//     between push and pull, counts as caught up. Shard 0 answers a pull at
//     clock i only if every computing learner has i − h ≤ S. Hence, among
//     the learners computing at any moment, shard-0 stamps differ by at
//     most S: no learner computes on weights more than S clocks behind the
//     newest weights handed out. Since every learner pushes to every shard,
//     the other shards' clocks advance with shard 0's, and a learner cannot
//     start a step before shard 0 lets it.
//   - No deadlock: shard 0's pulls wait only on learners it counts as
//     computing, and those received all other shards' replies too (no
//     other shard holds a softsync pull back), so they compute and
//     eventually push, pull or leave; if no learner is computing, every
//     pull whose minimum clock is reached is answered. The rule assumes that
//     a computing learner eventually sends something or is made to leave
//     (the runtime turns a lost connection into MsgLeave). Were every shard
//     to gate its own pulls, two learners could each be answered by one
//     shard and held by another, each counted as computing where the other
//     waits: a cycle the simulator finds within a few hundred random runs
//     once network jitter lets the shards' clocks diverge.
//
// The pull rule reduces drops; it does not remove them (learners already
// computing may still push more than S updates' worth of gradients).
//
// # Finite weights
//
// A shard never holds or serves a NaN or ±Inf weight or momentum value.
// Its initial weights must be finite (NewShard and Restore refuse others,
// naming the first), gradients with a NaN or ±Inf element are rejected
// (ErrNonFinite), and an update that would make any weight or momentum
// value non-finite — finite gradients and weights can overflow float32
// (3e38 pushed four times at rate 0.5 reaches −Inf) — is refused as a
// whole:
//
//   - no element moves: the weights and the momentum stay exactly as
//     they were, bit for bit, the finite elements of the update included;
//   - the update's gradients are discarded, all of them: under hardsync
//     the round's (every learner's of that round), under softsync the c
//     gradients the update combines (c₀, or fewer in a partial update);
//   - otherwise it takes its place like an applied update: the clock
//     advances (the round ends: waiting pulls are answered, with the
//     unchanged weights), its gradients count as accepted and their
//     samples toward the epoch; Ready.Updates reports it with
//     UpdateInfo.Refused set and Update.Learners listing who pushed its
//     gradients;
//   - the pending gradients of a softsync update are summed as they
//     arrive, and that sum may overflow before the update is made: the
//     update is then refused when it is made, and a checkpoint taken
//     meanwhile keeps the sum as it is (Restore takes it), so that a
//     restored shard refuses the same update;
//   - it is counted in Stats.Refused, and each of its gradients against
//     the learner that pushed it in Stats.RefusedGradients (a learner with
//     two gradients in one softsync update counts twice; a learner whose
//     gradient of a hardsync round stayed pending after it left counts
//     too). Which gradient made the combination overflow cannot be told:
//     every learner that took part is counted.
//
// The job goes on: the learners are not told, and the next update is
// made of the gradients that arrive next. RefusedLimit (16) updates
// refused in a row, though, are a job whose updates keep overflowing (a
// rate that diverges, say): the shard then rejects every later push with
// ErrDiverged, which ends the learners, and so the job, as diverged. An
// applied update starts the count again; a restored shard starts it at 0.
//
// The check costs the update nothing it did not do already: the solver
// bounds the magnitudes an update can reach from the largest magnitude of
// each gradient (the shard's scan for NaN and Inf computes it, sgd.MaxAbs)
// and of the weights and momentum, and applies the update in place when
// the bound is below the float32 range; only an update near that range is
// computed on copies first and kept if finite (see package sgd).
//
// # Pulls
//
// A pull is answered when the shard clock has reached its minimum clock
// and the rules above allow; until then it waits inside the core and is
// answered by a later Step. A learner has at most one waiting pull; a new
// pull replaces it. Waiting pulls are re-examined in learner-id order
// after every Step. The reply carries the weights and their stamp i.
//
// # Sequences, duplicates and rejections
//
// Each push carries a sequence number, strictly increasing per learner
// (gaps allowed), from 1 to 2⁶⁴−1. The core remembers the sequence of
// each learner's last accepted push across leaves and joins; a push whose
// sequence is at or below it is a duplicate (a resend after a reconnect):
// it is counted in Stats.Duplicates and ignored, so that every push is
// applied at most once. Nothing wraps: 2⁶⁴−1 is a push like any other,
// and every push after it is a duplicate. Dropped and redone pushes
// consume their sequence; rejected ones do not. The runtime's sequences are
// incarnation<<44 | n (Seq; docs/wire.md): a learner has at most 2²⁰
// lives (MaxIncarnation) of at most 2⁴⁴−1 messages each (MaxMessages),
// and its client refuses, rather than wraps, past either
// (ErrSeqExhausted for the messages).
//
// A push may also carry the job-wide id of its mini-batch (Msg.Batch, 0
// for none). The core keeps the ids of the gradients it accepted or
// dropped (a BatchSet); a push of an id in it is redone (the mini-batch
// was done again, by a restarted learner or one that took over a lost
// learner's chunk): it is counted in Stats.Redone and never applied, and
// its samples are not counted again. Under hardsync a redone push stamped
// with the current clock is its learner's push of the round, without a
// gradient: the round ends once every active learner has pushed, with an
// update of the gradients it has (a partial one if fewer than c₀), or,
// if every push of the round was redone, as an empty round: the clock
// advances, the weights and the momentum stay as they were, the waiting
// pulls are answered, and Stats.EmptyRounds counts it (a leave ends such
// a round too). So a learner blocked on its round never waits for a
// gradient that will not come. A redone push of an older round, or after
// the learner's gradient of this round, counts for nothing. Rejected
// pushes do not consume their mini-batch.
//
// A shard has a life (Shard.Life): a nonzero number its owner gives each
// start, from scratch or from a checkpoint (the Server draws one at
// random, the simulator a seeded one), on every reply. A push carries the
// life of the weights its gradient was computed on (Msg.Life, 0 for
// unknown); a push of another life was computed on weights the shard
// served before it was restored, whose stamp means nothing on the
// restored clock: it is given up, counted in Stats.StaleLife, and never
// applied. Like a dropped push it consumes its sequence; unlike one it
// does not consume its mini-batch. The life check comes right after the
// duplicate check, before the stamp check (an old life's stamp may be
// ahead of the restored clock).
//
// Under hardsync such a push, a duplicate too, still says where its
// learner is in the rounds: it pushed in round j (its stamp) of the
// life its weights came from, and its next push is of round j + 1. The
// restored shard continues that life's round numbers (or, restarted from
// scratch, takes them up), but it lost the pushes it had acknowledged
// after its checkpoint, which learners do not resend: counted from the
// restored clock, the learners whose pull the earlier life answered
// before it died would lose a step there and the others not, so that
// the shard would pair each learner's pushes with other steps of the
// others than the shards that kept their rounds do, and two such shifts
// on two shards make learners wait for each other's rounds for ever. So
// the push is the learner's claim: it counts as the learner's push,
// without a gradient, in every round from the current one up to j, and
// its pull waits for round j + 1; rounds that every active learner
// claims end at once, empty (Stats.EmptyRounds), and so do those every
// active learner claims but those that have neither claimed nor been
// answered a pull in this life (a learner restarted, or joining again
// after a pause: it takes the round the others push in next, as on the
// shards that kept their rounds). Once this life has answered a pull of
// a learner that had made no claim, that learner's pushes are paired
// with the round then in progress, and claims are ignored from then on.
// A learner that rejoins a restored shard server after another learner
// ran a round there alone (its server starts with no active learner)
// may still be a round off; one such shift alone does not stop a job.
//
// A message is rejected, counted in Stats.Rejected and answered with an
// error reply, and never applied, when it names another job
// (ErrWrongJob) or shard (ErrWrongShard), has an unknown type (ErrBadType),
// comes from a learner id outside the roster or, except for MsgJoin, not
// active (ErrUnknownLearner), or is a push to a shard that took the job
// for diverged (ErrDiverged, see "Finite weights"), a push whose gradient
// has the wrong length (ErrBadLength), a stamp ahead of the shard clock
// (ErrFutureClock), a NaN or ±Inf element (ErrNonFinite), or is a second
// hardsync push in one round (ErrAlreadyPushed). Checks run in that order,
// the duplicate and life checks before the stamp check, the redone check
// after it and before the scan for NaN and Inf (a redone push is never
// applied, so its elements are not read). The client recognises the
// reason in an error reply's text, so that errors.Is finds it on the
// learner's side too.
//
// # Epochs and the schedule
//
// The step schedule (sgd.Config.LRSteps) needs the epoch. Each push stands
// for Config.Batch samples (the learners' mini-batch μ; the paper's
// learners all use the same μ). The shard counts the samples of applied,
// refused and dropped gradients (those still consumed their data); an
// update uses epoch = ⌊samples before this update / Config.DataSize⌋, so
// that λ = 1 matches a single learner that counts epochs in iterations
// (Caffe). With DataSize = 0 the epoch stays 0 and the schedule must be
// empty.
//
// # Statistics
//
// Stats counts, per shard: updates, applied and refused (and per learner
// the gradients refused updates discarded), and empty hardsync rounds
// (Updates + Refused + EmptyRounds = Clock, unless restored); pushes
// accepted (Gradients), dropped as too stale, ignored as duplicates or as
// redone, given up for another life (StaleLife), and rejected per reason,
// which add up to the pushes the shard received; the staleness of
// accepted gradients as a histogram (index τ; the last bucket collects τ
// ≥ HistogramLen−1), their sum (for the mean) and maximum. Each shard
// sees every gradient (its slice), so the stats of one shard describe the
// run; shards may differ slightly because they do not synchronise.
//
// # Exactly once
//
// A job gives each of its mini-batches an id (Msg.Batch: its index in
// the job + 1) and pushes each with it; learners push through a Client,
// which resends what a failed connection may have lost. Then:
//
// At most once: a shard's weights hold at most one gradient per
// mini-batch. A resend of a push the shard had is a duplicate (its
// sequence), and a push of a mini-batch the shard consumed (accepted or
// dropped), by whichever learner or incarnation, is redone; neither is
// applied. The consumed set is saved with the weights in a checkpoint
// (Checkpoint.Consumed), so a shard restored from one forgets exactly the
// mini-batches whose gradients the restore removed from its weights. One
// exception: a checkpoint re-split onto another number of shards gives a
// new shard the mini-batches all the old shards it takes elements from
// had consumed (ps/checkpoint.Resplit), so that no mini-batch counts as
// consumed for elements that never got its gradient; a mini-batch only
// some of them had consumed, if done again, is applied a second time to
// the elements of those that had.
//
// At least once: the gradient of every mini-batch a learner pushes is
// consumed by every shard (accepted, or dropped as too stale by the
// protocol's rules) unless
//
//	(a) the shard restarted from a checkpoint older than the acceptance
//	    (a gradient accepted, and acknowledged, after the version was
//	    written is gone with the shard's memory; the client does not
//	    resend what was acknowledged);
//	(b) the gradient was computed on weights of an earlier life of the
//	    shard: it was pushed, or resent, to a shard restarted since its
//	    pull, and is given up (Stats.StaleLife), its mini-batch not
//	    consumed;
//	(c) the learner died (or its Redial gave up) before the push reached
//	    the shard, and nobody redid that mini-batch.
//
// A push is delivered once every shard has answered a request the client
// sent after it (the order of "Runtime"): the shards have then decided
// about it, and a resend can change nothing. Client reports each
// delivered mini-batch (ClientConfig.OnDelivered), so that a job can
// resume a learner's chunk after the mini-batches the shards have and
// redo only the others: case (c) then happens only if nobody redoes
// them. Redone pushes cost a message and nothing else: their samples are
// not counted again, and under hardsync they complete their learner's
// round (see "Sequences, duplicates and rejections").
//
// # The client core
//
// ClientCore is the protocol of one learner's side as a state machine:
// the stamps and lives of the weights it pulled, its sequence numbers,
// the pushes each shard has not acknowledged, the pull clocks, the call
// in progress and the answers it waits for, membership and the delivery
// of mini-batches. Like Shard it has no goroutines, clocks, locks or I/O,
// reads no map in an order that matters, and gives the same outputs for
// the same events, bit for bit. Client runs it over rdma connections;
// ps/sim runs it in virtual time.
//
// Links: the shards of one server share a link (ClientCoreConfig.Links),
// one connection at a time; each connection is a generation of its link,
// counted from 0, and every message the core makes names the link and
// generation it is for.
//
// Events, each a method returning a ClientReady:
//
//   - calls of the learner: Pull (synchronous, or asynchronous: the
//     prefetch of PullAsync), WaitPull, Push (a whole push or, from
//     PushReady, a part), Join, Leave, Snapshot, Cancel (the caller gave
//     the call in progress up), Close;
//   - messages: Recv(link, gen, shard, reply), a weights reply, an
//     acknowledgement or a rejection received on a connection;
//   - the links: LinkDown(link, gen, cause) (a connection broke),
//     LinkUp(link) (its replacement is in place), LinkDead(link, err)
//     (it cannot be replaced), Unsent(link, gen, seq, err) (a message
//     was not sent on a connection still usable).
//
// There is no timer: every wait ends with a message, a link's news or
// the caller's Cancel, and time never enters a decision, so a runtime or
// a simulator passes none in.
//
// Outputs (ClientReady): the messages to send, in order, each for a
// link and generation; the links to redial (Dial); the mini-batches
// every shard has acknowledged, in push order (Delivered); the call
// that ended and its error (Done, Err). A call that waits for answers
// (a pull, join, leave or snapshot) ends once every shard has answered,
// or at its first failure: the rejection of one of its requests, weights
// of the wrong length, a link it needs given up, Cancel, Close.
// Rejections of earlier messages are reported, joined after the call's
// own error, by the end of the call in progress or of the next one. A
// push, a WaitPull and every call refused (the vector of the wrong
// length, another call in progress, a push partly sent, a link given
// up) end in their own event. Only one call waits at a time; pushes may
// be made while an asynchronous pull waits.
//
// Ordering guarantees:
//
//   - on each connection the messages go in the order the core made
//     them; its pulls, leaves and snapshots go in the order of their
//     sequence numbers, and every push of a shard made before such a
//     request goes before it with a lower number: so an answer to
//     request s from shard k acknowledges exactly the pushes to k with
//     numbers below s (a shard steps one connection's messages in
//     order, see "Runtime");
//   - on a new connection (LinkUp), before anything else: a join of
//     each of its shards if the learner is a member (but those that
//     acknowledged the Leave in progress), then every push those shards
//     have not acknowledged, in order, as it was first sent (same
//     sequence, stamp, life and mini-batch), then the requests the call
//     in progress still awaits there, with new numbers. A request lost
//     with a connection is therefore always asked again: no call waits
//     for an answer that cannot come. One waits: under hardsync, an
//     asynchronous pull's request to a shard that has not had the push
//     of the weights last pulled (the push of the step the prefetch is
//     for) goes right after that push (Push sends it), so that a shard
//     restarted since counts that push as the learner's of its round
//     before it answers (see "Sequences, duplicates and rejections");
//   - a pull asks each shard for weights no older than the stamp of the
//     weights last pulled from it (under hardsync, the next round's after
//     a push computed on those weights, or for a prefetch), except a
//     shard whose stamp came from a connection since replaced, which it
//     asks for any weights (minimum clock 0): its server may have
//     restarted from a checkpoint behind that stamp, in another life; a
//     prefetch answered there by the same life with the round the
//     learner computes on asks again, for the next round;
//   - a push carries the stamps and lives of the last pull that ended
//     (a prefetch's become current only at WaitPull), the weights the
//     gradient was computed on;
//   - a mini-batch is delivered once every shard has answered a request
//     made after its push on the connection the push last went on: the
//     shards have stepped it, and a resend can change nothing;
//   - messages of a replaced connection, and answers to requests no
//     longer awaited, are ignored.
//
// The runtime (Client) steps the core under one lock with each call of
// its learner and each message it receives, queues the messages each
// event makes on their connection's queue in order and sends them
// outside the lock (a message for a replaced generation is dropped:
// the restore covers it), receives on every connection the call in
// progress waits on (the caller's goroutine, one receiver goroutine per
// further connection, the prefetch goroutine), tells the core of broken
// connections and redials them (ClientConfig.Redial), and returns from a
// call when the core ends it. Connections receive weights straight where
// the core places them (ClientCore.Place: the caller's vector), and
// pushes lend the caller's gradient, so no payload is copied by the
// client. A simulator steps the same events in virtual time.
//
// # Runtime
//
// Server runs one or more shard cores behind one rdma.Listener, each core
// on its own goroutine. Its decisions (identities, routes, epoch
// snapshots, final weights) are those of ServerCore, a deterministic core
// around the shards' that the job's chaos simulator drives too; Server
// moves bytes and lends weights. Client is the learner side, one connection per
// server (Pull from all shards, Push each shard its slice; PullAsync
// receives the next weights on a goroutine while the learner computes,
// and Push keeps stamping with the stamps of the weights the gradient was
// computed on until WaitPull makes the new ones current), a runtime over
// a ClientCore. Group runs the servers of a parameter server in one
// process. wire.go is the one place where core messages meet rdma
// messages.
//
// Identity and membership: a learner's identity (id and incarnation, the
// top 20 bits of its sequence numbers) is bound to its connection, and a
// second connection claiming it is refused; a lost connection is reported
// to the server's owner (ServerConfig.OnLost), who decides whether the
// learner has left (Server.Evict: a pull of the evicted incarnation that
// was waiting is refused, so that a learner still running stops instead
// of waiting for it). Learners leave by themselves when they
// are done or idle (MsgLeave) and join again (MsgJoin); a shard
// acknowledges both (Reply.Ack, TypeAck on the wire; a leave of a learner
// that is not active changes nothing and is acknowledged too), and
// Client.Leave and Client.Join wait for every shard's acknowledgement.
//
// Order: a connection's reader hands each message to its shard's
// goroutine before it reads the next, and that goroutine steps them one
// at a time, so a shard steps the messages of one connection in the order
// they arrived; the client sends each connection's messages in the order
// its core made them (see "The client core"). So a weights reply or an
// acknowledgement from shard k answering request s tells the client that
// shard k has stepped every message it sent shard k on that connection
// before s.
//
// Resends: the client keeps each push until its shard has acknowledged
// it that way (a reference to the caller's gradient: see Client.Push).
// When a connection fails and ClientConfig.Redial replaces it, the client
// first joins the learner again on the new connection's shards if it is a
// member (a shard server restarted from a checkpoint may hold it as
// gone), then resends every push they have not acknowledged, in order,
// with its sequence, stamp, life and mini-batch, then repeats the
// requests it was waiting for; a connection replaced 8 times in a row
// with nothing received on it is given up. A shard ignores the resends it had
// (duplicates) and steps the others. Each Server start draws new shard
// lives (Server.Lives), so the resends to a server restored from a
// checkpoint are given up (see "Exactly once"). Server.Consumed tells a
// restarted coordinator which mini-batches each shard has.
//
// End of a job: Server.Finish says the job's data is done; once every
// learner has left, each shard applies what is pending (a partial update)
// and is final. An evaluator reads the weights with TypeSnapshot requests
// (Client.Snapshot): the snapshot of each epoch end, taken when the shard
// has consumed e·P gradients (ServerConfig.Snapshots) and kept until a
// later epoch or the final weights are asked for, and the final weights.
//
// # Checkpoints
//
// A shard's durable state is its weights, the solver state (momentum and
// the pending accumulation), clock, sample count, membership, per-learner
// last sequences, the learners of the pending gradients, the consumed
// mini-batches and, for hardsync, who pushed in the current round, plus
// its counters: Shard.Checkpoint copies it and Restore rebuilds a Shard
// from it (refusing non-finite weights, momentum or accumulation, and a
// consumed list that is not a BatchSet's). The life is not saved: a
// restored shard gets a new one (Restore's argument), so that gradients
// computed on the weights it served before are told apart. Waiting pulls,
// the computing set and the count of updates refused in a row are not
// saved: learners reconnect, join again, resend what the shard never
// acknowledged and pull again. Restore closes a hardsync round in
// progress (an update of its pending gradients, or an empty round):
// learners rejoin a restored shard one by one while the other shards
// have run on, and a round kept open could wait for learners that wait
// for another shard's round. The learners' claims of rounds (pushes of
// an earlier life under hardsync) are not saved either: the resends on
// the next connection make them again. Package ps/checkpoint stores checkpoints
// in files and re-splits them onto another number of shards
// (docs/checkpoint.md); RangeOf gives one shard's range for it.
package ps
