package qemu

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Image is a base image: a disk a VM's overlay is made on, and, for an
// image booted directly (the project's own Debian image, hack/vm-image.sh),
// its kernel, initrd and kernel command line. A stock cloud image (Ubuntu,
// Debian) has its own bootloader and no Kernel: it boots from its disk.
type Image struct {
	Name string `json:"name"`
	// Disk is the image file; Format its format (qcow2 or raw).
	Disk   string `json:"disk"`
	Format string `json:"format"`
	Kernel string `json:"kernel,omitempty"`
	Initrd string `json:"initrd,omitempty"`
	// Cmdline is the kernel's command line when Kernel is set.
	Cmdline string `json:"kernelCmdline,omitempty"`
}

// Catalogue maps a job spec's image names to base images.
type Catalogue map[string]Image

// ImageFile is the description next to an image built by
// hack/vm-image.sh; LoadImage reads it.
const ImageFile = "image.json"

// LoadImage reads a base image: path is an image file (qcow2 or raw,
// booted from its own bootloader), or a directory holding image.json (its
// paths relative to the directory).
func LoadImage(ctx context.Context, name, path string) (Image, error) {
	st, err := os.Stat(path)
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", name, err)
	}
	if st.IsDir() {
		b, err := os.ReadFile(filepath.Join(path, ImageFile))
		if err != nil {
			return Image{}, fmt.Errorf("image %s: %w", name, err)
		}
		var im Image
		if err := json.Unmarshal(b, &im); err != nil {
			return Image{}, fmt.Errorf("image %s: %s: %w", name, ImageFile, err)
		}
		im.Name = name
		for _, p := range []*string{&im.Disk, &im.Kernel, &im.Initrd} {
			if *p != "" && !filepath.IsAbs(*p) {
				*p = filepath.Join(path, *p)
			}
		}
		if im.Disk == "" {
			return Image{}, fmt.Errorf("image %s: %s names no disk", name, ImageFile)
		}
		if im.Format == "" {
			if im.Format, err = probeFormat(ctx, im.Disk); err != nil {
				return Image{}, fmt.Errorf("image %s: %w", name, err)
			}
		}
		return im, nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return Image{}, err
	}
	format, err := probeFormat(ctx, abs)
	if err != nil {
		return Image{}, fmt.Errorf("image %s: %w", name, err)
	}
	return Image{Name: name, Disk: abs, Format: format}, nil
}

// probeFormat asks qemu-img what a disk file is: qcow2 and raw are taken.
func probeFormat(ctx context.Context, path string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "qemu-img", "info", "--output=json", path).Output()
	if err != nil {
		return "", fmt.Errorf("qemu-img info %s: %w", path, err)
	}
	var info struct {
		Format string `json:"format"`
	}
	if err := json.Unmarshal(out, &info); err != nil {
		return "", err
	}
	switch info.Format {
	case "qcow2", "raw":
		return info.Format, nil
	}
	return "", fmt.Errorf("%s is %s: want a qcow2 or raw image", path, info.Format)
}

// ParseImageFlag reads NAME=PATH (the --image flag).
func ParseImageFlag(v string) (name, path string, err error) {
	name, path, ok := strings.Cut(v, "=")
	if !ok || name == "" || path == "" {
		return "", "", fmt.Errorf("--image %q: want NAME=PATH", v)
	}
	return name, path, nil
}

// Names are the catalogue's image names, sorted.
func (c Catalogue) Names() []string {
	out := make([]string, 0, len(c))
	for n := range c {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Lookup is the image of a spec's image name.
func (c Catalogue) Lookup(name string) (Image, error) {
	if im, ok := c[name]; ok {
		return im, nil
	}
	return Image{}, fmt.Errorf("no image %q in this rack's catalogue (it has: %s)", name, strings.Join(c.Names(), ", "))
}

// Detect says which accelerator this host can run a stock guest with:
// "kvm" when /dev/kvm opens and the CPU has hardware virtualization (vmx
// or svm in /proc/cpuinfo), else "tcg". A /dev/kvm without them is a
// paravirtual one (kvm_pvm, as on this project's build machines), which
// cannot run a stock kernel or UEFI firmware.
func Detect() string {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return "tcg"
	}
	f.Close()
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "tcg"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "flags") {
			continue
		}
		for _, fl := range strings.Fields(line) {
			if fl == "vmx" || fl == "svm" {
				return "kvm"
			}
		}
		break
	}
	return "tcg"
}
