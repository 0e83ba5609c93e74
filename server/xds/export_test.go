package xds

// Bookkeeping returns what the server keeps for open streams: the streams
// admitted, the sources they come from, and the caches' open watches.
func (s *Server) Bookkeeping() (streams, sources, watches int) {
	streams, sources = s.limits.counts()
	for _, c := range s.caches {
		watches += c.NumCacheWatches()
	}
	return streams, sources, watches
}
