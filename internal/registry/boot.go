package registry

import (
	"os"
	"strings"
	"sync"
)

// bootIDPath is where Linux tells the boot id: a random UUID chosen at
// each boot.
const bootIDPath = "/proc/sys/kernel/random/boot_id"

// CurrentBoot is the id of the running boot of this host, read once; ""
// where the kernel does not tell (off Linux). Records name the boot they
// were written in (Record.Boot).
func CurrentBoot() string { return currentBoot() }

// currentBoot reads the boot id once; a test replaces it.
var currentBoot = sync.OnceValue(func() string {
	raw, err := os.ReadFile(bootIDPath)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(raw))
})
