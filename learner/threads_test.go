package learner

import (
	"testing"

	"github.com/softsync/softsync/learner/nn"
)

func spec(t testing.TB, name string) *nn.Spec {
	s, err := nn.Builtin(name)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestPlanThreads(t *testing.T) {
	lenet, cifar := spec(t, "lenet"), spec(t, "cifar10_full")
	for _, c := range []struct {
		spec                            *nn.Spec
		cores, learners, batch, threads int
		want                            Parallelism
	}{
		{lenet, 2, 1, 64, 0, Parallelism{1, 2}},
		{lenet, 2, 1, 4, 0, Parallelism{1, 1}},  // small LeNet batches: one worker
		{lenet, 2, 1, 16, 0, Parallelism{1, 2}}, // 8 images per worker
		{cifar, 2, 1, 2, 0, Parallelism{1, 2}},  // cifar10_full: one image is work enough
		{lenet, 2, 2, 64, 0, Parallelism{1, 1}}, // one core each
		{lenet, 2, 8, 8, 0, Parallelism{1, 1}},  // more learners than cores
		{lenet, 16, 4, 128, 0, Parallelism{1, 4}},
		{lenet, 16, 4, 16, 0, Parallelism{1, 2}}, // at most one worker per 8 LeNet images
		{lenet, 2, 1, 64, 1, Parallelism{1, 1}},  // --threads 1
		{lenet, 2, 2, 256, 8, Parallelism{1, 8}}, // --threads wins over the cores
	} {
		if got := PlanThreads(c.spec, c.cores, c.learners, c.batch, c.threads); got != c.want {
			t.Errorf("PlanThreads(%s, %d cores, %d learners, batch %d, threads %d) = %+v, want %+v",
				c.spec.Name, c.cores, c.learners, c.batch, c.threads, got, c.want)
		}
	}
}
