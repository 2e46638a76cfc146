module github.com/softsync/softsync

go 1.26.0

require (
	github.com/klauspost/compress v1.20.4
	golang.org/x/sys v0.50.0
	gonum.org/v1/gonum v0.17.0
)
