package cninet

// Networks returns the names of every network this Configurator knows:
// the default network first, then the others sorted.
func (c *Configurator) Networks() []string {
	confs := c.nets.All(false)
	names := make([]string, len(confs))
	for i, conf := range confs {
		names[i] = conf.Info.Name
	}
	return names
}

// NetworkName returns the name of the default network: the one an
// Allocation that names no network joins.
func (c *Configurator) NetworkName() string {
	return c.nets.Default().Info.Name
}

// ConfList returns a copy of the default network's conflist bytes.
func (c *Configurator) ConfList() []byte {
	return append([]byte(nil), c.nets.Default().Bytes...)
}
