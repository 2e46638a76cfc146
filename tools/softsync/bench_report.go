package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/softsync/softsync/tools/bench"
)

func init() { addBenchCommand(newBenchReportCmd) }

func newBenchReportCmd(app *App) *cobra.Command {
	var in, summary, doc string
	c := &cobra.Command{
		Use:   "report",
		Short: "Render bench/results.json as markdown: bench/summary.md and the tables of docs/performance.md",
		Long: `Renders the results of softsync bench all as markdown tables, each figure
beside its reference and their ratio, headed by the machine and commit they
were measured on. --summary writes them to a file, --doc replaces the part
of a page between its "` + bench.MarkBegin + `" and
"` + bench.MarkEnd + `" lines and keeps the rest of the page;
with neither, the tables are printed.`,
		Example: `  softsync bench report --in bench/results.json --doc docs/performance.md`,
		Args:    cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			res, err := bench.ReadResults(in)
			if err != nil {
				return err
			}
			if summary == "" && doc == "" {
				_, err := fmt.Fprint(app.Out, bench.RenderSummary(res))
				return err
			}
			if summary != "" {
				if err := os.WriteFile(summary, []byte(bench.RenderSummary(res)), 0o644); err != nil {
					return err
				}
			}
			if doc != "" {
				return bench.RegenerateDoc(doc, res)
			}
			return nil
		},
	}
	c.Flags().StringVar(&in, "in", "bench/results.json", "results of softsync bench all")
	c.Flags().StringVar(&summary, "summary", "", "write the tables to this file (bench/summary.md)")
	c.Flags().StringVar(&doc, "doc", "", "a page whose generated part to replace (docs/performance.md)")
	return c
}
