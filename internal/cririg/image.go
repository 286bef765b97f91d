package cririg

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"runtime"
)

// WriteBusyboxLayer writes a container image layer tarball holding the
// host's static busybox and the applets the rigs run (sh, httpd, echo).
func WriteBusyboxLayer(path string) error {
	bin, err := exec.LookPath("busybox")
	if err != nil {
		return err
	}
	src, err := os.Open(bin)
	if err != nil {
		return err
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		return err
	}
	return writeTar(path, func(tw *tar.Writer) error {
		for _, dir := range []string{"bin/", "tmp/", "etc/"} {
			if err := tw.WriteHeader(&tar.Header{Name: dir, Typeflag: tar.TypeDir, Mode: 0o1777}); err != nil {
				return err
			}
		}
		if err := tw.WriteHeader(&tar.Header{Name: "bin/busybox", Typeflag: tar.TypeReg, Mode: 0o755, Size: fi.Size()}); err != nil {
			return err
		}
		if _, err := io.Copy(tw, src); err != nil {
			return err
		}
		for _, applet := range []string{"sh", "httpd", "echo"} {
			if err := tw.WriteHeader(&tar.Header{Name: "bin/" + applet, Typeflag: tar.TypeSymlink, Linkname: "busybox"}); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeTar writes a tar file at path with what fill writes to it.
func writeTar(path string, fill func(tw *tar.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	tw := tar.NewWriter(f)
	if err := fill(tw); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	return f.Close()
}

// WritePauseImage writes a docker-archive image tarball (what `docker
// save` writes and `ctr images import` reads) tagged ref: one layer, the
// host's static busybox (WriteBusyboxLayer), whose entrypoint sleeps
// forever, as a pod sandbox's pause process does.
func WritePauseImage(path, ref string) error {
	layerPath := path + ".layer"
	if err := WriteBusyboxLayer(layerPath); err != nil {
		return err
	}
	defer os.Remove(layerPath)
	layer, err := os.ReadFile(layerPath)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(layer)
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": []string{"/bin/busybox", "sleep", "2147483647"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{"sha256:" + hex.EncodeToString(sum[:])}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal([]map[string]any{{"Config": "config.json", "RepoTags": []string{ref}, "Layers": []string{"layer.tar"}}})
	if err != nil {
		return err
	}
	return writeTar(path, func(tw *tar.Writer) error {
		for _, file := range []struct {
			name string
			data []byte
		}{{"layer.tar", layer}, {"config.json", config}, {"manifest.json", manifest}} {
			if err := tw.WriteHeader(&tar.Header{Name: file.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(file.data))}); err != nil {
				return err
			}
			if _, err := io.Copy(tw, bytes.NewReader(file.data)); err != nil {
				return err
			}
		}
		return nil
	})
}
