package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/learner"
	"github.com/softsync/softsync/learner/nn"
	"github.com/softsync/softsync/learner/nn/onnx"
	"github.com/softsync/softsync/ps/checkpoint"
)

func init() { addCommand(newExportCmd) }

func newExportCmd(app *App) *cobra.Command {
	var out, model, load string
	c := &cobra.Command{
		Use:   "export --onnx OUT.onnx --model M --load W",
		Short: "Write a network and its trained weights as an ONNX model, for serving",
		Long: `Write the network --model with the weights of --load (a weights file of softsync train
--save) as an ONNX model: opset 13, IR version 7, standard operators only, so that a
runtime implementing opset 13 serves it without a converter.

The graph runs the network at test: batch norm with its running statistics, dropout
left out. Its input "pixels" is float32 [batch, C, H, W]: the image's values before
normalisation, as the training data holds them (bytes 0-255; for image folders the
resized and cropped image, planes R, G, B). The graph normalises them as training did,
input = scale·pixels − mean, with the weights file's scale and mean (per pixel or per
channel). Outputs: "logits" [batch, classes] and "probabilities" (their softmax). The
model's doc_string and metadata_props (softsync.*) say the same; docs/onnx.md has the
mapping of each layer to ONNX operators.`,
		Example: `  softsync export --onnx lenet.onnx --model lenet --load lenet.weights
  softsync export --onnx resnet18.onnx --model resnet18 --load resnet18.weights`,
		Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return runExport(app.Out, out, model, load)
		},
	}
	f := c.Flags()
	f.StringVar(&out, "onnx", "", "the ONNX file to write (required); written to a temporary file and renamed")
	f.StringVar(&model, "model", "", "the network of the weights (required): lenet, cifar10_full, mlp, alexnet, resnet18, or the path of a spec file")
	f.StringVar(&load, "load", "", "the weights file (required; docs/weights.md)")
	return c
}

func runExport(w io.Writer, out, model, load string) error {
	for _, f := range []struct{ flag, v string }{{"--onnx", out}, {"--model", model}, {"--load", load}} {
		if f.v == "" {
			return fmt.Errorf("%s is required", f.flag)
		}
	}
	dir := filepath.Dir(out)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("--onnx %s: folder %s does not exist", out, dir)
	}
	if fi, err := os.Stat(out); err == nil && fi.IsDir() {
		return fmt.Errorf("--onnx %s is a folder", out)
	}
	spec, err := nn.Load(model)
	if err != nil {
		return fmt.Errorf("--model: %w", err)
	}
	weights, err := learner.LoadWeights(load, spec)
	if err != nil {
		return fmt.Errorf("--load: %w", err)
	}
	sum, err := checkpoint.WriteAtomic(dir, filepath.Base(out), func(f io.Writer) error {
		return onnx.Export(f, spec, weights.Params, weights.Normalizer)
	})
	if err != nil {
		return fmt.Errorf("--onnx: %w", err)
	}
	fmt.Fprintf(w, "wrote %s (%.1f MB, ONNX opset %d)\n%s\n", out, float64(sum.Size)/1e6, onnx.Opset, onnx.Describe(spec, weights.Normalizer))
	return nil
}
