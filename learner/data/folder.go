package data

import (
	"bufio"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// ImageList is a labelled list of image files: one split of an image
// folder (ReadFolderSplit) or a list file (ReadListFile). Paths are
// slash-separated and relative to Root; image i is Paths[i] of class
// Labels[i], whose name is Classes[Labels[i]].
type ImageList struct {
	Source  string // the folder or list file, for messages
	Root    string
	Paths   []string
	Labels  []int32
	Classes []string
}

// Len is the number of images.
func (l *ImageList) Len() int { return len(l.Paths) }

// File returns the path of image i as the operating system names it.
func (l *ImageList) File(i int) string {
	p := filepath.FromSlash(l.Paths[i])
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(l.Root, p)
}

// imageExt are the file name extensions (lower-cased) a folder's images
// have; other files are ignored. The content decides how a file is
// decoded, not its extension.
var imageExt = map[string]bool{".jpg": true, ".jpeg": true, ".jpe": true, ".png": true, ".gif": true}

// IsImageName reports whether a file of this name counts as an image of
// a folder: its extension is .jpg, .jpeg, .jpe, .png or .gif in any case,
// and it is not hidden (a name starting with a dot).
func IsImageName(name string) bool {
	base := path.Base(filepath.ToSlash(name))
	return !strings.HasPrefix(base, ".") && imageExt[strings.ToLower(path.Ext(base))]
}

// ReadImageFolder reads an ImageNet-style folder: dir/train/CLASS/… and
// dir/val/CLASS/… (see ReadFolderSplit). The classes are train's; val
// may lack some of them, but a class of val that train lacks is an
// error. val is nil when dir has no val folder.
func ReadImageFolder(dir string) (train, val *ImageList, err error) {
	train, err = ReadFolderSplit(filepath.Join(dir, "train"), nil)
	if err != nil {
		return nil, nil, err
	}
	vdir := filepath.Join(dir, "val")
	if _, err := os.Stat(vdir); err != nil {
		return train, nil, nil
	}
	val, err = ReadFolderSplit(vdir, train.Classes)
	return train, val, err
}

// ReadFolderSplit reads a folder of class folders, as torchvision's
// ImageFolder does: every sub-folder of dir is a class, labelled by the
// position of its name in sorted (byte) order, and holds its images at
// any depth below it, taken in sorted path order (files that are not
// images by IsImageName are ignored; symbolic links to folders are not
// followed). With classes set, the class names are those (a training
// split's) and a sub-folder not among them is an error. A class folder
// without images is an error, as is a dir without class folders; both
// wrap ErrFormat and name the path. Files directly in dir are ignored.
func ReadFolderSplit(dir string, classes []string) (*ImageList, error) {
	names, err := classFolders(dir)
	if err != nil {
		return nil, err
	}
	l := &ImageList{Source: dir, Root: dir, Classes: names}
	index := map[string]int32{}
	if classes != nil {
		l.Classes = classes
	}
	for i, c := range l.Classes {
		index[c] = int32(i)
	}
	for _, name := range names { // sorted by os.ReadDir
		label, ok := index[name]
		if !ok {
			return nil, fmt.Errorf("%s: %w: class %q is not a class of the training set", filepath.Join(dir, name), ErrLabel, name)
		}
		before := len(l.Paths)
		err := walkImages(filepath.Join(dir, name), func(p string) error {
			rel, _ := filepath.Rel(dir, p)
			l.Paths = append(l.Paths, filepath.ToSlash(rel))
			l.Labels = append(l.Labels, label)
			return nil
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %w", dir, ErrMissing, err)
		}
		if len(l.Paths) == before {
			return nil, noImages(filepath.Join(dir, name))
		}
	}
	return l, nil
}

// FolderClasses returns the classes of a folder of class folders, as
// ReadFolderSplit names them, with its errors for a folder without class
// folders or a class folder without images; it reads each class folder
// only until it finds an image, so that the classes of a large set are
// known at once.
func FolderClasses(dir string) ([]string, error) {
	names, err := classFolders(dir)
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		found := false
		err := walkImages(filepath.Join(dir, name), func(string) error {
			found = true
			return fs.SkipAll
		})
		if err != nil {
			return nil, fmt.Errorf("%s: %w: %w", dir, ErrMissing, err)
		}
		if !found {
			return nil, noImages(filepath.Join(dir, name))
		}
	}
	return names, nil
}

// classFolders returns the names of dir's class folders (its
// sub-folders but hidden ones), sorted; none is an error.
func classFolders(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", dir, ErrMissing, err)
	}
	var names []string
	for _, e := range ents {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return nil, fmt.Errorf("%s: %w: no class folders (want %s/CLASS/IMAGE)", dir, ErrFormat, dir)
	}
	return names, nil
}

// walkImages calls f with the path of every image (IsImageName) below
// root, in sorted path order, skipping hidden folders; symbolic links to
// folders are not followed. f may return fs.SkipAll.
func walkImages(root string, f func(path string) error) error {
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if d.IsDir() || !IsImageName(p) {
			return nil
		}
		return f(p)
	})
}

// noImages is the error of a class folder without images.
func noImages(dir string) error {
	return fmt.Errorf("%s: %w: class folder holds no images (.jpg, .jpeg, .png, .gif)", dir, ErrFormat)
}

// ReadListFile reads a Caffe-style list file (ImageData's source): one
// image a line, its path (relative to root, or absolute), a space, its
// label, a non-negative integer; the path is everything before the
// line's last space, so it may hold spaces. Blank lines are skipped. The
// classes are 0 … the largest label, named by their numbers. A bad line
// is an error wrapping ErrFormat that names the file and line.
func ReadListFile(file, root string) (*ImageList, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("%s: %w: %w", file, ErrMissing, err)
	}
	defer f.Close()
	l := &ImageList{Source: file, Root: root}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	top := int32(-1)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimRight(sc.Text(), " \t\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		sp := strings.LastIndexAny(line, " \t")
		if sp <= 0 {
			return nil, fmt.Errorf("%s:%d: %w: want \"PATH LABEL\", got %q", file, n, ErrFormat, line)
		}
		p, lab := strings.TrimRight(line[:sp], " \t"), line[sp+1:]
		v, err := strconv.ParseInt(lab, 10, 32)
		if err != nil || v < 0 {
			return nil, fmt.Errorf("%s:%d: %w: label %q is not a non-negative integer", file, n, ErrFormat, lab)
		}
		if p == "" {
			return nil, fmt.Errorf("%s:%d: %w: empty path", file, n, ErrFormat)
		}
		l.Paths = append(l.Paths, filepath.ToSlash(p))
		l.Labels = append(l.Labels, int32(v))
		top = max(top, int32(v))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", file, ErrFormat, err)
	}
	if len(l.Paths) == 0 {
		return nil, fmt.Errorf("%s: %w: no images listed", file, ErrFormat)
	}
	for c := range top + 1 {
		l.Classes = append(l.Classes, strconv.Itoa(int(c)))
	}
	return l, nil
}

// sameClasses reports whether two lists name the same classes.
func sameClasses(a, b *ImageList) bool { return slices.Equal(a.Classes, b.Classes) }
