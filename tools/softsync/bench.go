package main

import "github.com/spf13/cobra"

func init() {
	addCommand(func(app *App) *cobra.Command {
		c := &cobra.Command{
			Use:   "bench",
			Short: "Measure kernels, training and transport",
		}
		for _, f := range benchCommands {
			c.AddCommand(f(app))
		}
		return c
	})
}
