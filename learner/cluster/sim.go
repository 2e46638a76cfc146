package cluster

import "github.com/softsync/softsync/ps/sim"

// SimResult returns the result of the job c run in the simulator
// (ps/sim: the job's shards in virtual time) that ended with res, given
// the history and the test error of the final weights the caller
// measured: every time is virtual, and the weights are res's.
func (c *Config) SimResult(res *sim.Result, history []Epoch, testError float64) *Result {
	r := &Result{History: history, TestError: testError, Weights: res.Weights, Seconds: res.Time, Shards: res.Shards}
	if c.Normalizer != nil {
		r.Normalizer = *c.Normalizer
	}
	if c.Train != nil {
		plan := c.Plan(c.Train.Info().Len)
		r.BatchesPerEpoch = plan.BatchesPerEpoch()
	}
	for _, s := range res.Steps {
		r.LearnerSteps = append(r.LearnerSteps, int64(s))
		r.Steps += int64(s)
	}
	r.Images = r.Steps * int64(c.Batch)
	if res.Time > 0 {
		r.ImagesPerSec = float64(r.Images) / res.Time
	}
	return r
}
