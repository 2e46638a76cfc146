package onnx

import (
	"fmt"

	"github.com/softsync/softsync/kernels"
	"github.com/softsync/softsync/learner/nn"
	pb "github.com/softsync/softsync/learner/nn/onnx/internal/onnxpb"
)

// inShape is the shape of layer i's first input.
func (b *builder) inShape(i int) nn.Shape {
	if j := b.spec.Inputs(i)[0]; j >= 0 {
		return b.spec.Output(j)
	}
	return b.spec.Input
}

// layer writes layer i (not the loss) reading ins, its output named out,
// and returns its output.
func (b *builder) layer(i int, out string, ins []value) (value, error) {
	l := &b.spec.Layers[i]
	x := ins[0]
	in := b.inShape(i)
	switch l.Kind {
	case nn.Conv:
		x = b.to4d(x)
		args := []string{x.name, b.segment(l.Name+".weight", l.Out, in.C/l.Group, l.Kernel, l.Kernel)}
		if !l.NoBias {
			args = append(args, b.segment(l.Name+".bias", l.Out))
		}
		b.node("Conv", args, out, attrInts("kernel_shape", l.Kernel, l.Kernel), attrInts("strides", l.Stride, l.Stride),
			attrInts("pads", l.Pad, l.Pad, l.Pad, l.Pad), attrInts("dilations", 1, 1), attrInt("group", l.Group))
	case nn.FC:
		x = b.to2d(x)
		args := []string{x.name, b.segment(l.Name+".weight", l.Out, in.Len())}
		if !l.NoBias {
			args = append(args, b.segment(l.Name+".bias", l.Out))
		}
		b.node("Gemm", args, out, attrInt("transB", 1))
		return value{out, 2}, nil
	case nn.Pool:
		return b.pool(i, out, b.to4d(x))
	case nn.ReLU:
		b.node("Relu", []string{x.name}, out)
		return value{out, x.rank}, nil
	case nn.LRN:
		b.lrn(l, out, b.to4d(x))
	case nn.Dropout: // identity at test
		return x, nil
	case nn.BatchNorm:
		b.node("BatchNormalization", []string{x.name, b.segment(l.Name+".weight", in.C), b.segment(l.Name+".bias", in.C),
			b.segment(l.Name+".running_mean", in.C), b.segment(l.Name+".running_var", in.C)},
			out, attrFloat("epsilon", l.Eps))
		return value{out, x.rank}, nil
	case nn.Add:
		y := ins[1]
		if x.rank != y.rank {
			x, y = b.to4d(x), b.to4d(y)
		}
		b.node("Add", []string{x.name, y.name}, out)
		return value{out, x.rank}, nil
	default:
		return value{}, fmt.Errorf("%s: layer %s: %w: kind %s", b.spec.Name, l.Name, ErrUnsupported, l.Kind)
	}
	return value{out, 4}, nil
}

// pool writes pooling layer i: GlobalMaxPool or GlobalAveragePool, or
// MaxPool or AveragePool (after a Pad where an average window runs past
// the padded input) with ceil_mode=0 and the padding that gives the
// spec's output size, as the package doc's "Pooling at the edges" says.
func (b *builder) pool(i int, out string, x value) (value, error) {
	l := &b.spec.Layers[i]
	in, o := b.inShape(i), b.spec.Output(i)
	if l.Global {
		op := "GlobalMaxPool"
		if l.Mode == kernels.AvgPool {
			op = "GlobalAveragePool"
		}
		b.node(op, []string{x.name}, out)
		return value{out, 4}, nil
	}
	k, s, p := l.Kernel, l.Stride, l.Pad
	// tail < kernel: nn.Parse refuses a last window that starts past the input.
	tailH, tailW := (o.H-1)*s+k-in.H-p, (o.W-1)*s+k-in.W-p
	window := []*pb.AttributeProto{attrInts("kernel_shape", k, k), attrInts("strides", s, s), attrInt("ceil_mode", 0)}
	if l.Mode == kernels.MaxPool {
		b.node("MaxPool", []string{x.name}, out, append(window, attrInts("pads", p, p, max(p, tailH), max(p, tailW)))...)
		return value{out, 4}, nil
	}
	if tailH <= p && tailW <= p {
		b.node("AveragePool", []string{x.name}, out, append(window, attrInts("pads", p, p, p, p), attrInt("count_include_pad", 1))...)
		return value{out, 4}, nil
	}
	src := x.name
	if p > 0 {
		pads := b.fresh(out + ".pads")
		b.g.Initializer = append(b.g.Initializer, int64Tensor(pads, []int{0, 0, p, p, 0, 0, p, p}))
		src = b.fresh(out + ".padded")
		b.node("Pad", []string{x.name, pads}, src)
	}
	b.node("AveragePool", []string{src}, out,
		append(window, attrInts("pads", 0, 0, max(0, tailH-p), max(0, tailW-p)), attrInt("count_include_pad", 0))...)
	return value{out, 4}, nil
}

// lrn writes LRN layer l. Across channels it is ONNX's LRN, whose window
// of size channels centred on each one and scale k + α/size·Σx² are
// Caffe's ACROSS_CHANNELS. Within a channel ONNX has no operator; it is
// written as Caffe builds it: x² averaged over the size×size zero-padded
// window (AveragePool, count_include_pad=1: Σx²/size²), times α, plus k,
// to the power −β, times x.
func (b *builder) lrn(l *nn.LayerSpec, out string, x value) {
	if l.Region == kernels.AcrossChannels {
		b.node("LRN", []string{x.name}, out, attrInt("size", l.Size), attrFloat("alpha", l.Alpha),
			attrFloat("beta", l.Beta), attrFloat("bias", l.K))
		return
	}
	r := l.Size / 2
	sq := b.fresh(out + ".square")
	b.node("Mul", []string{x.name, x.name}, sq)
	avg := b.fresh(out + ".mean_square")
	b.node("AveragePool", []string{sq}, avg, attrInts("kernel_shape", l.Size, l.Size), attrInts("strides", 1, 1),
		attrInts("pads", r, r, r, r), attrInt("count_include_pad", 1))
	scaled := b.fresh(out + ".alpha_mean_square")
	b.node("Mul", []string{avg, b.constant(l.Name+".alpha", []float32{l.Alpha})}, scaled)
	scale := b.fresh(out + ".scale")
	b.node("Add", []string{scaled, b.constant(l.Name+".k", []float32{l.K})}, scale)
	pow := b.fresh(out + ".scale_pow")
	b.node("Pow", []string{scale, b.constant(l.Name+".neg_beta", []float32{-l.Beta})}, pow)
	b.node("Mul", []string{x.name, pow}, out)
}
