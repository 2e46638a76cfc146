// Package sgd is the solver update of softsync: mini-batch SGD with
// momentum, weight decay, per-segment learning-rate and decay multipliers, a
// step schedule, the staleness-aware learning rate of Zhang et al.
// (IJCAI 2016) and the other rules for stale gradients below (rates,
// gradient corrections, momentum compensation). The single learner and
// every parameter-server shard apply updates through the same Solver; the
// single learner is the case λ = 1, c = 1, τ = 0.
//
// # The update
//
// A Solver owns the range [lo, hi) of the flat parameter vector θ: the
// momentum history v of that range, and an accumulator for the gradients of
// the update being collected. An update i → i+1 combines c ≥ 1 gradients
// Δθ_1 … Δθ_c (each already averaged over its mini-batch), where gradient l
// was computed on weights stamped j_l and arrives at clock i, so that its
// staleness is τ_l = i − j_l ≥ 0. With η the scheduled base rate (see
// below), each gradient gets a factor s_l and the whole update a factor u:
//
//	LRStaleness  s_l = 1/max(τ_l, 1)   u = 1                     (α(τ) = η/τ, η when τ = 0)
//	LRAverage    s_l = 1               u = 1/max(⟨τ⟩, 1)          (⟨τ⟩ = mean τ_l of the update)
//	LRConstant   s_l = 1               u = 1
//	LRPoly       s_l = (1+τ_l)^(−A)    u = 1                     (A = Config.PolyA)
//	LRHinge      s_l = 1 for τ_l ≤ B, 1/(A(τ_l−B)+1) beyond; u = 1  (B, A = Config.HingeB, HingeA)
//
// LRPoly and LRHinge are the polynomial and hinge staleness functions of
// FedAsync (Xie, Koyejo and Gupta, 2019), applied per gradient as α0/τ is.
//
// and, for each element k of a segment with multipliers lr_mult and
// decay_mult:
//
//	g_k = (u/c) · Σ_l s_l·Δθ_l[k]          the paper's (1/c)·Σ α(τ_l)·Δθ_l, divided by η
//	ᾱ   = (u/c) · Σ_l s_l                  the mean α(τ_l)/η of the update
//	v_k = momentum·v_k + η·lr_mult·(g_k + ᾱ·decay·decay_mult·θ_k)
//	θ_k = θ_k − v_k
//
// Partial updates. Config.Quorum is c₀, the number of gradients a full
// update combines. The parameter server fills every update with c₀
// gradients except where the job's membership or its end leaves fewer (a
// learner lost under hardsync, the last gradients of a job); such an update
// of c < c₀ gradients uses c₀ in place of c in both g_k and ᾱ:
//
//	g_k = (u/c₀) · Σ_l s_l·Δθ_l[k]          ᾱ = (u/c₀) · Σ_l s_l
//
// so that each gradient keeps the weight it has in a full update: the
// partial update is the update of its c gradients at the rate η·c/c₀,
// weight decay included, a shorter step rather than a noisier one. With
// c = c₀ nothing changes.
//
// Order of operations: each gradient is scaled by its s_l first, as it
// arrives (Add accumulates Σ s_l·Δθ_l in one pass over the gradient, so a
// gradient is read once and never kept); then, in the single fused pass of
// Update, the division by c, the weight decay, the momentum and the step.
// Weight decay is scaled by ᾱ, the mean learning-rate factor of the update,
// so that it is damped like the gradients it accompanies; with τ = 0 for
// every gradient (hardsync) ᾱ = 1 and the update is exactly Caffe's
// SGDSolver on the averaged gradient:
//
//	diff = grad + decay·decay_mult·θ;  v = momentum·v + η·lr_mult·diff;  θ −= v
//
// so λ learners of batch μ under hardsync give the weights of one learner of
// batch μλ on the same samples, up to float32 rounding. The factor for
// 0 < ⟨τ⟩ < 1 in LRAverage is capped at 1 (the literal α0/⟨τ⟩ would raise the
// rate above α0); per-gradient τ are integers, where the cap changes nothing.
//
// # State segments
//
// Segments of kind param.State (batch norm's running statistics) are
// not parameters: a gradient's values in them are measurements (a
// mini-batch's mean or unbiased variance), which the solver folds into
// a moving average instead of a step. Add sums them unscaled, apart
// from the learnable values' accumulation (which runs over each range
// of learnable segments), and an update of c gradients sets each state
// value to
//
//	θ_k = (1 − m)·θ_k + m·(1/c)·Σ_l Δθ_l[k]      (m = param.StateMomentum = 0.1)
//
// with the actual c even for a partial update: no rate, staleness
// factor, correction, momentum (their momentum stays 0) or weight decay.
// The result, a convex combination of finite values, is finite; an
// update refused for its learnable values leaves the state values as
// they were too. The pending sums are part of State's Acc.
//
// # Gradient corrections
//
// With Config.Correction set, each gradient Δθ_l is first replaced, as it
// arrives, by a corrected one Δθ'_l, which then takes the place of Δθ_l
// above (its factor s_l included). The corrections compare the weights
// p the gradient was computed on (Grad.Pulled, the weights its learner
// pulled: the caller keeps them) with the current weights w (those the
// update will change; they do not change while an update collects its
// gradients). Elementwise, for each k:
//
//	CorrDC          Δθ'_k = g_k + λ·g_k²·(w_k − p_k)                  (g = Δθ_l, λ = Config.DCLambda)
//	CorrDCAdaptive  MS_k  = m·MS_k + (1−m)·g_k²,  then
//	                Δθ'_k = g_k + λ/√(MS_k + ε)·g_k²·(w_k − p_k)      (m = 0.95, ε = 1e-7)
//	CorrGap         Δθ'_k = g_k / G_k,  G_k = 1 + |w_k − p_k| / C_k,
//	                C_k   = √(S_k / (1−γ^t)) + ε                      (γ = 0.999, ε = 1e-8)
//
// CorrDC and CorrDCAdaptive are DC-ASGD-c and DC-ASGD-a of Zheng et al.,
// "Asynchronous Stochastic Gradient Descent with Delay Compensation"
// (ICML 2017): the first-order Taylor correction of a gradient computed
// at p to w, with the Hessian approximated by λ·g⊙g. MS is one running
// mean square of the gradients per element of the solver's range, shared
// by the learners and updated by every gradient before it is corrected
// (the paper's MeanSquare(t), t counting the gradients the server
// receives), starting at 0 without bias correction; the constants are the
// paper's (m) and its authors' code's (ε, inside the root). λ defaults to
// the paper's 0.04 (DC-ASGD-c) and 2 (DC-ASGD-a) when the rule's
// spelling gives none.
//
// CorrGap is Gap-Aware (Barkai, Hakimi and Schuster, "Gap-Aware
// Mitigation of Gradient Staleness", ICLR 2020): each element is divided
// by its gap, the distance the parameter moved since the pull measured
// in typical steps C, plus one (G = 1 when it did not move, so that a
// fresh gradient is unchanged, and G grows linearly with the gap). C is
// the root of a bias-corrected running mean S of the squares of the steps
// v_k the solver applied to that parameter (θ_k −= v_k: momentum, decay,
// lr_mult and the rate schedule included), over the t updates applied so
// far: S_k = γ·S_k + (1−γ)·v_k² after each applied update. The
// implementation of two of the authors (in FTPipe) keeps the same mean of
// the momentum buffer and scales its root by the largest rate so far;
// the applied step is the same quantity at a constant rate, and after a
// rate step follows the smaller steps. The gap divides the gradient only: the weight decay of the
// update is scaled by ᾱ as with every rule.
//
// The corrections change nothing where p = w (τ = 0, as under hardsync):
// the correction passes then add the gradient itself, bit for bit.
// Corrections combine with every rate (a rule such as
// "dc:0.04+staleness" corrects each gradient, then scales it by 1/τ);
// see Config.ParseRule for the spelling.
//
// # Momentum compensation
//
// Asynchrony acts as an implicit momentum of about 1 − 1/(⟨τ⟩+1)
// (Mitliagkas, Zhang, Hadjis and Ré, "Asynchrony begets momentum", 2016:
// their model of M asynchronous workers gives an implicit momentum of
// 1 − 1/M and a mean staleness of M − 1). With
// Config.MomentumComp, each update runs with the explicit momentum
//
//	m = max(0, Momentum − (1 − 1/(⟨τ⟩+1)))
//
// in place of Momentum, so that explicit plus implicit momentum stays at
// Momentum, and at least 0. ⟨τ⟩ is the mean staleness of the last
// MomentumWindow = 1,024 gradients the solver received (all of them while
// fewer), the update's own included; every update sets its momentum
// anew, before its pass (UpdateInfo.Momentum). τ counts updates, so the
// rule holds for any c. Under hardsync (τ = 0) m = Momentum.
//
// # The rules' state
//
// MS of CorrDCAdaptive (float32 per element), S and t of CorrGap
// (float32 per element, one count) and the window of recent τ of
// MomentumComp (1,024 int64) are the solver's; State exposes them and
// SetState restores them, so that a restored solver continues bit for bit.
// They describe the gradients received: a refused update (see below)
// leaves the gradients it discarded in MS and in the window of τ, while S
// and t only count applied updates. The pulled weights are the caller's.
//
// # The schedule
//
// η = LR·LRGamma^k, where k is the number of entries of LRSteps that are ≤
// the epoch passed to Update. The epoch is the number of complete passes
// over the data set before the update's own gradients (Caffe's iteration
// count before the step): with steps {120, 130}, every update of epoch
// index 120 (the 121st epoch) uses LR·LRGamma. The caller counts epochs; the
// parameter-server shard derives them from the samples it has received.
//
// # Finite updates
//
// An update that would make any θ_k or v_k NaN or ±Inf is refused as a
// whole (UpdateInfo.Refused): θ and v keep their values bit for bit, and
// the pending gradients are discarded. Gradients are finite (the caller
// checks them), and so are θ and v, since no update makes them otherwise;
// but float32 sums of finite values can overflow.
//
// The check costs the fused pass nothing. Add and Update take with each
// gradient a bound of its magnitudes (MaxAbs, which the caller's check
// for NaN and Inf computes in the same pass), and the solver keeps bounds
// of |θ_k| and |v_k| from what its updates wrote. Before the pass it
// bounds the result of each element, per segment, in float64:
//
//	T = m·V + |a_acc|·A + |a_last|·L + |b|·W     (V, A, L, W: the bounds of |v|, |acc|, |last|, |θ|)
//
// (the factors a and b of the pass, A = Σ s_l·MaxAbs(Δθ_l)), each rounded
// float32 operation growing a value by at most (1+2⁻²⁴): with 2c+8 of
// them, W' = (W+T)·(1+2⁻²⁴)^(2c+8) bounds |θ'| and T·(1+2⁻²⁴)^(2c+8)
// bounds |v'|. If W' is below half the largest float32, the pass runs in
// place, as without the check, and W' and T become the next bounds.
// Otherwise the bounds, which only grow, are first replaced by the
// measured magnitudes (MaxAbs of θ, v and the accumulator: three read
// passes, about once in millions of updates of ordinary training); if the
// update is still near the float32 range it runs on copies of θ and v
// with the same kernels, and the copies replace θ and v only if every
// value is finite. The two paths give the same bits.
//
// A corrected gradient's bound is its own: CorrDC and CorrDCAdaptive
// compute the largest |Δθ'_k| in their pass (the correction can make a
// gradient larger, or overflow float32: the update is then refused);
// CorrGap only shrinks a gradient, so MaxAbs(Δθ_l) still bounds it.
//
// # Memory
//
// Parameters, gradients and momentum are float32. A Solver for [lo, hi)
// holds hi−lo floats of momentum and, once an update collects a gradient
// it does not fold into its pass, hi−lo floats of accumulator; CorrDCAdaptive
// and CorrGap hold hi−lo floats more (MS, S), MomentumComp 8 KiB (the
// window of τ), LRPoly 512 bytes (its factors for τ < 64); the first update near the float32 range (see above)
// allocates 2(hi−lo) floats for the copies; nothing else is allocated
// after NewSolver, except by the passes a Parallel runner spreads (see
// below), a few words each. The corrections need, besides, the weights each
// learner pulled: hi−lo floats per learner, which the caller keeps.
//
// Passes over memory per update of c gradients: c−1 accumulations (the
// first a scaled copy) and one fused pass that reads the accumulator, the
// last gradient, θ and v and writes θ and v. On amd64 the passes run in
// assembly, AVX-512 or AVX2+FMA after the CPU (the level isa.Best reports,
// decided at run time; LimitISA lowers it), otherwise, and with the
// purego build tag, in plain Go loops. With a correction, every gradient
// goes through a correction pass in plain Go on every platform (it also
// reads p and w, and MS or S; the last gradient of an update is
// accumulated too, not folded into the fused pass), and CorrGap adds a Go
// pass over v and S after each applied update: these rules cost several
// times the others per gradient (BenchmarkRules).
//
// # Parallel passes
//
// The passes are memory-bound and element-wise, and one goroutine does
// not use a machine's memory bandwidth. Given a runner (SetParallel, a
// Parallel that the solver's owner supplies: the solver starts no
// goroutine of its own), a solver cuts every pass over a span of at
// least 2¹⁸ elements into pieces of 2¹⁶ elements, counted from the
// span's start, and has the runner run ranges of whole pieces
// concurrently: the accumulations, the corrections, the fused update
// pass, Gap's pass over v and S, and the measurements and copies of a
// checked update. Each piece but a span's last is a multiple of every
// kernel's block, so every element goes through the same instructions as
// in one serial pass, and maxima are combined from per-range results
// after the ranges are done: the results are the same bits as serial,
// whatever ranges the runner makes and in whatever order it runs them.
// Parallel.MaxAbs is the same for the check a shard runs on a gradient.
package sgd
