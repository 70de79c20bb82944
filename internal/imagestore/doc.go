// Package imagestore is soda's store of OCI images on the host: pulled
// from a registry or imported from an OCI layout directory or a
// `docker save` archive, kept by content, and each unpacked once into a
// root file system that sandboxes share read-only.
//
// # Layout
//
// A store is a directory (DefaultDir: /var/lib/soda/images for root,
// $XDG_DATA_HOME/soda/images for a user) holding
//
//	lock                  flock(2): shared for reads, exclusive for writes
//	blobs/sha256/HEX      manifests, configs and layers, by digest
//	images/HEX.json       the record of a complete image (manifest HEX)
//	rootfs/HEX/           its unpacked root file system
//	refs.json             names (registry/repo:tag, repo@digest) → digest
//	leases/HEX/ID         a user of image HEX, held by flock (Lease)
//	tmp/                  work in progress: partial blobs, unpacks
//
// The directory must be the caller's and writable by it alone (Open
// refuses another's, a group- or world-writable one, or a symbolic link):
// whoever could write it could choose a sandbox's root.
// Every blob is hashed while it is written to tmp/ and renamed into
// blobs/ only when its digest and size match the descriptor; a pull
// stages all of its blobs first, so a mismatch stores nothing. An unpack
// happens in tmp/ and is renamed to rootfs/HEX when every layer is
// applied; the record images/HEX.json, written (renamed) last, is the
// completion marker. A pull or unpack killed midway (kill -9) leaves
// only files in tmp/, or a rootfs/HEX without its record: both are
// removed whenever the store is opened and before each write, under the
// exclusive lock, so nothing half-written is ever used. A writer holds
// the exclusive lock for its whole run, so a live pull is never taken for
// a dead one.
//
// # Registries
//
// Pull speaks the registry protocol through go-containerregistry, with
// the credentials of authn.DefaultKeychain (~/.docker/config.json,
// $DOCKER_CONFIG, $XDG_RUNTIME_DIR/containers/auth.json,
// $REGISTRY_AUTH_FILE). HTTPS is checked against the system's roots.
// Plain HTTP is allowed only to a registry on the loopback address
// (localhost, 127.0.0.0/8, ::1), as Docker allows; go-containerregistry
// would otherwise fall back to it for RFC 1918 addresses and *.localhost
// names, which the store's transport refuses for every request and
// redirect. A registry that sends nothing for Options.StallTimeout fails
// the pull with a StallError; ctx bounds the whole pull.
//
// # Unpacking
//
// Layers are untrusted. Unpack applies them with its own tar reader onto
// an os.Root, so no operation can leave the image's directory, and it
// resolves every name itself, as the kernel would inside a sandbox whose
// root is the image: an absolute name (/etc/x) is taken relative to the
// image root, and an absolute symbolic link met on the way (/var/run ->
// /run) is followed from the image root, never from the host's (os.Root
// alone would refuse it). A symbolic link whose ".." climbs above the
// image root, met on the way to an entry (the link itself is kept), a
// name with a ".." component, and a hard link whose target is not a file
// inside the image are refused. Device nodes and FIFOs are skipped
// (reported in UnpackReport, not created: /dev is soda's to give); setuid
// and setgid bits are dropped unless UnpackOptions.KeepSetuid (the sticky
// bit is kept); extended attributes are all dropped, file capabilities
// included. Entries, per-file and total sizes, path lengths and the
// decompressed bytes of each layer (gzip, zstd or plain tar, detected by
// magic) are bounded by Limits, and each layer's uncompressed digest is
// checked against the config's diff_id. Each refusal is an *EntryError
// naming the layer digest and the entry. Run as root, owners and modes
// come from the tar headers; run as a user, files belong to the user.
package imagestore
