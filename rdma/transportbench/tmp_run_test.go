package transportbench
import ("context";"testing";"time";"os";"strings";"github.com/softsync/softsync/rdma")
func TestTmpRun(t *testing.T){
 var cs []rdma.Codec
 for _, n := range strings.Split(os.Getenv("CODECS"), ",") { c, _ := rdma.ParseCodec(n); cs = append(cs, c) }
 tr := strings.Split(os.Getenv("TRS"), ",")
 Run(context.Background(), Config{Transports: tr, Codecs: cs, MinTime: 2*time.Second, Baseline: os.Getenv("BASE")!=""}, func(r Row){ t.Logf("%-8s %-12s %9d %6.3f GB/s ratio %.3f enc %.4fs dec %.4fs rounds %d", r.Transport, r.Codec, r.Bytes, r.GBps, r.Ratio, r.EncodeSec, r.DecodeSec, r.Rounds) })
}
