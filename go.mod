module github.com/softsync/softsync

go 1.26
