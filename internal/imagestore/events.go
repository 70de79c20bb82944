package imagestore

// EventKind is what an Event reports.
type EventKind int

// The kinds of Event.
const (
	EventFetch  EventKind = iota // a blob is being fetched (Size bytes)
	EventUnpack                  // a layer is being applied
	EventStored                  // the image is complete
)

// Event is progress of a pull, import or unpack, for a terminal.
type Event struct {
	Kind   EventKind
	Digest string // the blob, layer or (EventStored) manifest
	Index  int    // the layer's index, from 0
	Count  int    // the number of layers
	Size   int64  // the blob's size (EventFetch)
}
