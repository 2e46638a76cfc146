package main

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"sync"
	"time"

	"golang.org/x/term"

	"github.com/softsync/softsync/learner/cluster"
	"github.com/softsync/softsync/tools/internal/textfmt"
)

// progress shows a training job's progress: on a terminal a one-line bar
// redrawn ten times a second with the epoch summaries printed above it;
// otherwise (output piped to a file or CI log) a log line per epoch and
// one every 30 seconds. It is hand-written rather than a progress-bar
// library because it must show the whole run (epoch, batch within the
// epoch, loss, images/s, ETA of the run) and interleave the epoch lines
// coming from the job's goroutines with the bar through one writer.
type progress struct {
	app      *App
	w        io.Writer
	tty      bool
	quiet    bool
	epochs   int
	learners int // of the job, for the data wait's fraction
	width    int
	events   chan cluster.Epoch
	done     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
}

func newProgress(app *App, quiet bool, epochs, learners int) *progress {
	p := &progress{app: app, w: os.Stderr, quiet: quiet, epochs: epochs, learners: learners, width: 80,
		events: make(chan cluster.Epoch, 1024), done: make(chan struct{})}
	fd := int(os.Stderr.Fd())
	p.tty = term.IsTerminal(fd)
	if w, _, err := term.GetSize(fd); err == nil && w > 20 {
		p.width = w
	}
	return p
}

// epoch receives a finished epoch from the job (any goroutine).
func (p *progress) epoch(e cluster.Epoch) {
	select {
	case p.events <- e:
	default: // the reporter is far behind: skip the line, the report has it
	}
}

// run starts the reporting goroutine for job (a *cluster.Job, or the
// coordinator of a job of several processes).
func (p *progress) run(job interface{ Progress() cluster.Progress }) {
	if p.quiet {
		return
	}
	p.wg.Go(func() {
		period := 100 * time.Millisecond
		if !p.tty {
			period = 30 * time.Second
		}
		tick := time.NewTicker(period)
		defer tick.Stop()
		for {
			select {
			case e := <-p.events:
				p.printEpoch(e)
			case <-tick.C:
				p.show(job.Progress())
			case <-p.done:
				for {
					select {
					case e := <-p.events:
						p.printEpoch(e)
					default:
						if p.tty {
							fmt.Fprint(p.w, "\r\x1b[K")
						}
						return
					}
				}
			}
		}
	})
}

// stop ends the reporting goroutine after it printed the pending epochs.
func (p *progress) stop() {
	p.stopOnce.Do(func() { close(p.done) })
	p.wg.Wait()
}

func (p *progress) printEpoch(e cluster.Epoch) {
	te, te5 := "n/a", "n/a"
	if !math.IsNaN(e.TestError) {
		te, te5 = fmt.Sprintf("%.2f%%", 100*e.TestError), fmt.Sprintf("%.2f%%", 100*e.TestErrorTop5)
	}
	if p.tty {
		fmt.Fprintf(p.w, "\r\x1b[Kepoch %d/%d  train loss %.4f  test error %s (top-5 %s)  %s\n", e.Epoch, p.epochs, e.TrainLoss, te, te5, textfmt.Duration(e.Seconds))
		return
	}
	p.app.Log.Info("epoch", "epoch", e.Epoch, "epochs", p.epochs, "train_loss", fmt.Sprintf("%.4f", e.TrainLoss),
		"test_error", te, "test_error_top5", te5, "seconds", fmt.Sprintf("%.1f", e.Seconds))
}

func (p *progress) show(s cluster.Progress) {
	if s.Steps == 0 || s.Waiting {
		return
	}
	rate := float64(s.Images) / s.Elapsed.Seconds()
	eta := time.Duration(float64(s.Elapsed) / float64(s.Steps) * float64(s.TotalSteps-s.Steps)).Round(time.Second)
	wait := dataWait(s, p.learners)
	if !p.tty {
		args := []any{"epoch", s.Epoch, "batch", s.Batch, "batches", s.Batches,
			"loss", fmt.Sprintf("%.4f", s.Loss), "images_per_sec", int(rate), "eta", eta}
		if wait >= minDataWait {
			args = append(args, "data_wait", fmt.Sprintf("%.1f%%", 100*wait))
		}
		p.app.Log.Info("progress", args...)
		return
	}
	fmt.Fprint(p.w, "\r"+renderBar(s, rate, wait, eta, p.width)+"\x1b[K")
}

// minDataWait is the fraction of their time the learners waited for
// data from which the progress shows it: below, the data keeps up.
const minDataWait = 0.005

// dataWait is the fraction of the learners' time they waited for data
// so far.
func dataWait(s cluster.Progress, learners int) float64 {
	if t := s.Elapsed.Seconds() * float64(max(learners, 1)); t > 0 {
		return min(s.DataWait.Seconds()/t, 1)
	}
	return 0
}

// renderBar draws one line of at most width columns:
// "epoch 3/10 [=====>    ] 450/937  loss 0.0412  5,120 img/s  ETA 1m23s",
// with "  data wait 4%" before the ETA when the learners waited for data
// (wait ≥ minDataWait).
func renderBar(s cluster.Progress, rate, wait float64, eta time.Duration, width int) string {
	head := fmt.Sprintf("epoch %d/%d ", s.Epoch, s.Epochs)
	dw := ""
	if wait >= minDataWait {
		dw = fmt.Sprintf("  data wait %.0f%%", 100*wait)
	}
	tail := fmt.Sprintf(" %d/%d  loss %.4f  %s img/s%s  ETA %s", s.Batch, s.Batches, s.Loss, textfmt.Thousands(int64(rate)), dw, eta)
	n := width - 1 - len([]rune(head)) - len([]rune(tail)) - 2
	if n < 5 {
		line := []rune(strings.TrimSpace(head + tail))
		return string(line[:min(len(line), max(width-1, 0))])
	}
	n = min(n, 40)
	fill := 0
	if s.Batches > 0 {
		fill = n * s.Batch / s.Batches
	}
	bar := strings.Repeat("=", fill)
	if fill < n {
		bar += ">" + strings.Repeat(" ", n-fill-1)
	}
	return head + "[" + bar + "]" + tail
}
