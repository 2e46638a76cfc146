package sgd

// MomentumWindow is the number of recent gradients whose mean staleness
// ⟨τ⟩ sets the momentum under Config.MomentumComp.
const MomentumWindow = 1024

// tauWindow holds the staleness of the last MomentumWindow gradients: a
// ring, filled in order until full, and the exact sum of its values.
type tauWindow struct {
	taus []int64 // capacity MomentumWindow
	next int     // once full, the oldest entry, overwritten next
	sum  int64
}

func (t *tauWindow) add(tau int) {
	if len(t.taus) < MomentumWindow {
		t.taus = append(t.taus, int64(tau))
	} else {
		t.sum -= t.taus[t.next]
		t.taus[t.next] = int64(tau)
		t.next = (t.next + 1) % MomentumWindow
	}
	t.sum += int64(tau)
}

// mean returns ⟨τ⟩ of the window (0 when empty).
func (t *tauWindow) mean() float64 {
	if len(t.taus) == 0 {
		return 0
	}
	return float64(t.sum) / float64(len(t.taus))
}

// ordered returns a copy of the window, oldest first.
func (t *tauWindow) ordered() []int64 {
	return append(append(make([]int64, 0, len(t.taus)), t.taus[t.next:]...), t.taus[:t.next]...)
}

// set replaces the window by taus, oldest first (at most MomentumWindow).
func (t *tauWindow) set(taus []int64) {
	t.taus, t.next, t.sum = append(t.taus[:0], taus...), 0, 0
	for _, x := range taus {
		t.sum += x
	}
}

// compensated returns the momentum under momentum compensation: m lowered
// by the implicit momentum 1 − 1/(⟨τ⟩+1) = ⟨τ⟩/(⟨τ⟩+1), at least 0.
func compensated(m, meanTau float64) float64 {
	return max(0, m-meanTau/(meanTau+1))
}
