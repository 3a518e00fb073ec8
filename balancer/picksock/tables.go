package picksock

import (
	"encoding/binary"
	"maps"
	"math"
	"slices"

	"github.com/switchyard-proxy/switchyard/balancer"
)

// Decisions the shim applies itself (docs/pick-protocol.md, "Decisions
// applied by the shim"): generation pushes, hash tables and premade picks.

// Codes of a table or premade reply besides CodeOK and CodeUnknownBackend.
const (
	// CodeNoTable: the backend has no decision data of the kind asked for
	// (another algorithm, or a configuration change made it so).
	CodeNoTable = 2
)

const (
	// MaxKeyBytes bounds the literal and variable-name bytes of a hash-key
	// template sent in a table reply; a longer template gets CodeNoTable and
	// its picks go through the socket.
	MaxKeyBytes = 4096
	// MaxPremade bounds the picks of one premade reply.
	MaxPremade = 1024
	// tableFixed is the size of a table reply before its key and points.
	tableFixed = headerLen + 1 + 4 + 1 + 1 + 2 + 4 + 4 + 2
)

// AppendGen appends a generation push (TypeGen, id 0).
func AppendGen(dst []byte, gen uint32) []byte {
	dst, start := appendHeader(dst, TypeGen, 0)
	dst = binary.BigEndian.AppendUint32(dst, gen)
	return finish(dst, start)
}

// DecodeGen decodes a generation push.
func DecodeGen(frame []byte) (uint32, error) {
	r, _, err := replyReader(frame, TypeGen)
	if err != nil {
		return 0, err
	}
	gen := r.u32()
	if r.bad || len(r.b) != 0 {
		return 0, ErrShort
	}
	return gen, nil
}

// AppendSubscribe appends a subscribe frame.
func AppendSubscribe(dst []byte) []byte {
	dst, start := appendHeader(dst, TypeSubscribe, 0)
	dst = appendStr8(dst, "")
	return finish(dst, start)
}

// AppendTable appends a request for the chunk of backend's hash table that
// starts at point offset.
func AppendTable(dst []byte, id uint32, backend string, offset uint32) []byte {
	dst, start := appendHeader(dst, TypeTable, id)
	dst = appendStr8(dst, backend)
	dst = binary.BigEndian.AppendUint32(dst, offset)
	return finish(dst, start)
}

// AppendPremade appends a request for count premade picks.
func AppendPremade(dst []byte, id uint32, backend string, count uint16) []byte {
	dst, start := appendHeader(dst, TypePremade, id)
	dst = appendStr8(dst, backend)
	dst = binary.BigEndian.AppendUint16(dst, count)
	return finish(dst, start)
}

// TableChunk is a decoded table reply: the key template, and the points
// Offset .. Offset+len(Hashes)-1 of a ring of Total points over NPeers peers
// (owners index the backend info's peer list).
type TableChunk struct {
	Code          byte
	Gen           uint32
	Kind          balancer.TableKind
	Key           []balancer.KeyPart
	NPeers        uint16
	Total, Offset uint32
	Hashes        []uint32
	Owners        []uint16
	// PeerKeys: TableStickyPersistent's upstream keys, by peer.
	PeerKeys []string
	// Subsets: TableSubset's members of each subset (indices into the
	// info's peer list).
	Subsets [][]uint16
	// Recipe: a sticky table's cookie recipe.
	Recipe *balancer.CookieRecipe
}

// wireKey is the key template as sent: a sticky table sends its cookie name
// as a single literal.
func wireKey(t balancer.HashTable) []balancer.KeyPart {
	if t.Kind == balancer.TableHash || t.Kind == balancer.TableSubset {
		return t.Key
	}
	return []balancer.KeyPart{{Lit: t.Cookie}}
}

// recipeBytes is the size of a sticky table's cookie recipe on the wire, or
// MaxFrame when it cannot be sent.
func recipeBytes(c *balancer.CookieRecipe) int {
	if c == nil {
		return 0
	}
	if len(c.BackendKey) > 255 || len(c.MaxAge) > 255 || len(c.SameSite) > 255 || len(c.Domain) > math.MaxUint16 ||
		len(c.Path) > math.MaxUint16 || len(c.Locations) > math.MaxUint16 {
		return MaxFrame
	}
	n := 1 + len(c.BackendKey) + 1 + 8 + 1 + len(c.MaxAge) + 2 + len(c.Domain) + 2 + len(c.Path) + 1 + len(c.SameSite) + 2
	for host, paths := range c.Locations {
		if len(host) > math.MaxUint16 || len(paths) > math.MaxUint16 {
			return MaxFrame
		}
		n += 2 + len(host) + 2
		for _, p := range paths {
			if len(p) > math.MaxUint16 {
				return MaxFrame
			}
			n += 2 + len(p)
		}
	}
	return n
}

// appendRecipe appends a cookie recipe (recipeBytes said it fits).
func appendRecipe(dst []byte, c *balancer.CookieRecipe) []byte {
	dst = appendStr8(dst, c.BackendKey)
	flags := byte(0)
	if c.HasExpires {
		flags |= 1
	}
	if c.Secure {
		flags |= 2
	}
	if c.ConditionalNone {
		flags |= 4
	}
	if c.ChangeOnFailure {
		flags |= 8
	}
	dst = append(dst, flags)
	dst = binary.BigEndian.AppendUint64(dst, uint64(c.Expires))
	dst = appendStr8(dst, c.MaxAge)
	dst = appendStr16(dst, c.Domain)
	dst = appendStr16(dst, c.Path)
	dst = appendStr8(dst, c.SameSite)
	hosts := slices.Sorted(maps.Keys(c.Locations))
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(hosts)))
	for _, h := range hosts {
		dst = appendStr16(dst, h)
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(c.Locations[h])))
		for _, p := range c.Locations[h] {
			dst = appendStr16(dst, p)
		}
	}
	return dst
}

// decodeRecipe reads a cookie recipe.
func decodeRecipe(r *reader, name string) *balancer.CookieRecipe {
	c := &balancer.CookieRecipe{Name: name}
	c.BackendKey = string(r.bytes(int(r.u8())))
	flags := r.u8()
	c.HasExpires, c.Secure, c.ConditionalNone = flags&1 != 0, flags&2 != 0, flags&4 != 0
	c.ChangeOnFailure = flags&8 != 0
	c.Expires = int64(r.u64())
	c.MaxAge = string(r.bytes(int(r.u8())))
	c.Domain = string(r.bytes(int(r.u16())))
	c.Path = string(r.bytes(int(r.u16())))
	c.SameSite = string(r.bytes(int(r.u8())))
	nh := int(r.u16())
	for i := 0; i < nh && !r.bad; i++ {
		if c.Locations == nil {
			c.Locations = map[string][]string{}
		}
		h := string(r.bytes(int(r.u16())))
		np := int(r.u16())
		paths := []string{}
		for k := 0; k < np && !r.bad; k++ {
			paths = append(paths, string(r.bytes(int(r.u16()))))
		}
		c.Locations[h] = paths
	}
	return c
}

// peerKeysBytes is the size of a table's section after its points: a
// persistent table's peer keys, a subset table's subsets, a sticky table's
// cookie recipe.
func peerKeysBytes(t balancer.HashTable) int {
	return tailBytes(t) + recipeBytes(t.Recipe)
}

func tailBytes(t balancer.HashTable) int {
	if t.Kind == balancer.TableSubset {
		if len(t.Subsets) == 0 || len(t.Subsets) > math.MaxUint16 || len(t.Subsets[0]) > 255 {
			return MaxFrame // cannot be sent
		}
		return 3 + 2*len(t.Subsets)*len(t.Subsets[0])
	}
	if t.Kind != balancer.TableStickyPersistent {
		return 0
	}
	n := 2
	for _, k := range t.PeerKeys {
		n += 1 + len(k)
	}
	return n
}

// keyBytes is the size of t's key template on the wire, or -1 if it cannot
// be sent (too long, or more than 255 parts).
func keyBytes(t balancer.HashTable) int {
	key := wireKey(t)
	if len(key) > 255 {
		return -1
	}
	n := 0
	for _, p := range key {
		n += 3 + len(p.Lit) + len(p.Var)
	}
	if n > MaxKeyBytes {
		return -1
	}
	return n
}

// AppendTableReply appends the reply to a table request for the points from
// offset: as many as fit in one frame. A table whose key cannot be sent, or
// whose owners do not fit a u16, is answered CodeNoTable.
func AppendTableReply(dst []byte, id uint32, code byte, gen uint32, t balancer.HashTable, npeers int, offset uint32) []byte {
	kb, pk := keyBytes(t), peerKeysBytes(t)
	if code == CodeOK && (kb < 0 || npeers > math.MaxUint16 || len(t.Hashes) > math.MaxInt32 ||
		tableFixed-4+kb+pk > MaxFrame || t.Kind == balancer.TableStickyPersistent && len(t.PeerKeys) != npeers ||
		(t.Kind == balancer.TableSticky || t.Kind == balancer.TableStickyPersistent) && t.Recipe == nil) {
		code = CodeNoTable
	}
	dst, start := appendHeader(dst, TypeTableReply, id)
	dst = append(dst, code)
	dst = binary.BigEndian.AppendUint32(dst, gen)
	if code != CodeOK {
		dst = append(dst, 0, 0)             // no kind, no key parts
		dst = append(dst, 0, 0, 0, 0, 0, 0) // npeers, total
		dst = binary.BigEndian.AppendUint32(dst, offset)
		dst = append(dst, 0, 0)
		return finish(dst, start)
	}
	dst = append(dst, byte(t.Kind))
	key := wireKey(t)
	dst = append(dst, byte(len(key)))
	for _, p := range key {
		if p.Var != "" {
			dst = append(dst, 1)
			dst = appendStr16(dst, p.Var)
		} else {
			dst = append(dst, 0)
			dst = appendStr16(dst, p.Lit)
		}
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(npeers))
	total := uint32(len(t.Hashes))
	dst = binary.BigEndian.AppendUint32(dst, total)
	dst = binary.BigEndian.AppendUint32(dst, offset)
	room := (MaxFrame + 4 - tableFixed - kb - pk) / 6
	n := 0
	if offset < total {
		n = min(int(total-offset), room, math.MaxUint16)
	}
	dst = binary.BigEndian.AppendUint16(dst, uint16(n))
	for i := int(offset); i < int(offset)+n; i++ {
		dst = binary.BigEndian.AppendUint32(dst, t.Hashes[i])
		dst = binary.BigEndian.AppendUint16(dst, uint16(t.Owners[i]))
	}
	switch t.Kind {
	case balancer.TableStickyPersistent:
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(t.PeerKeys)))
		for _, k := range t.PeerKeys {
			dst = appendStr8(dst, k)
		}
		dst = appendRecipe(dst, t.Recipe)
	case balancer.TableSticky:
		dst = appendRecipe(dst, t.Recipe)
	case balancer.TableSubset:
		dst = binary.BigEndian.AppendUint16(dst, uint16(len(t.Subsets)))
		dst = append(dst, byte(len(t.Subsets[0])))
		for _, set := range t.Subsets {
			for _, m := range set {
				dst = binary.BigEndian.AppendUint16(dst, uint16(m))
			}
		}
	}
	return finish(dst, start)
}

// DecodeTableReply decodes a table reply (for Go clients and tests).
func DecodeTableReply(frame []byte) (id uint32, t TableChunk, err error) {
	r, id, err := replyReader(frame, TypeTableReply)
	if err != nil {
		return 0, t, err
	}
	t.Code = r.u8()
	t.Gen = r.u32()
	t.Kind = balancer.TableKind(r.u8())
	np := int(r.u8())
	for i := 0; i < np && !r.bad; i++ {
		kind := r.u8()
		s := string(r.bytes(int(r.u16())))
		if kind == 1 {
			t.Key = append(t.Key, balancer.KeyPart{Var: s})
		} else {
			t.Key = append(t.Key, balancer.KeyPart{Lit: s})
		}
	}
	t.NPeers = r.u16()
	t.Total = r.u32()
	t.Offset = r.u32()
	n := int(r.u16())
	for i := 0; i < n && !r.bad; i++ {
		t.Hashes = append(t.Hashes, r.u32())
		t.Owners = append(t.Owners, r.u16())
	}
	switch t.Kind {
	case balancer.TableStickyPersistent:
		nk := int(r.u16())
		for i := 0; i < nk && !r.bad; i++ {
			t.PeerKeys = append(t.PeerKeys, string(r.bytes(int(r.u8()))))
		}
		t.Recipe = decodeRecipe(r, t.Key[0].Lit)
	case balancer.TableSticky:
		t.Recipe = decodeRecipe(r, t.Key[0].Lit)
	case balancer.TableSubset:
		ns, size := int(r.u16()), int(r.u8())
		for i := 0; i < ns && !r.bad; i++ {
			set := make([]uint16, size)
			for m := range set {
				set[m] = r.u16()
			}
			t.Subsets = append(t.Subsets, set)
		}
	}
	if r.bad || len(r.b) != 0 {
		return 0, TableChunk{}, ErrShort
	}
	return id, t, nil
}

// Premade is one premade pick: what a pick reply would say for a request
// without the backend's variables.
type Premade struct {
	Alternative bool
	Backend     string
	EWMAScore   float64
	Candidates  []string
	// Keys are the upstream keys of a sticky backend's new session, one
	// per candidate (nil otherwise).
	Keys []string
	// Own is a routing decision only (flags bit 4, no candidates): the
	// request's peers come from a lease of Backend's own rotation.
	Own bool
}

// premadeOwnEntry appends a premade routing decision: the request goes to
// backend (an alternative when alt), whose own rotation's lease gives its
// peers. It returns dst unchanged and false when the frame would be too long.
func premadeOwnEntry(dst []byte, start int, backend string, alt bool) ([]byte, bool) {
	size := 1 + 1 + min(len(backend), 255) + 8 + 1
	if len(dst)-start-4+size > MaxFrame {
		return dst, false
	}
	flags := byte(4)
	if alt {
		flags |= 1
	}
	dst = append(dst, flags)
	dst = appendStr8(dst, backend)
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(-1))
	return append(dst, 0), true
}

// premadeEntry appends one premade pick, or returns dst unchanged and false
// when it would make the frame that starts at start longer than MaxFrame.
func premadeEntry(dst []byte, start int, picks []balancer.Pick) ([]byte, bool) {
	return premadeEntryKeys(dst, start, picks, nil)
}

// premadeEntryKeys is premadeEntry with a sticky new session's upstream key
// after each candidate (flags bit 1) when keys is not nil.
func premadeEntryKeys(dst []byte, start int, picks []balancer.Pick, keys []string) ([]byte, bool) {
	first := &picks[0]
	size := 1 + 1 + min(len(first.Backend), 255) + 8 + 1
	for i := range picks {
		size += 1 + min(len(picks[i].Peer), 255)
		if keys != nil {
			size += 1 + min(len(keys[i]), 255)
		}
	}
	if len(dst)-start-4+size > MaxFrame {
		return dst, false
	}
	flags := byte(0)
	if first.Alternative {
		flags = 1
	}
	if keys != nil {
		flags |= 2
	}
	dst = append(dst, flags)
	dst = appendStr8(dst, first.Backend)
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(first.EWMAScore))
	dst = append(dst, byte(len(picks)))
	for i := range picks {
		dst = appendStr8(dst, picks[i].Peer)
		if keys != nil {
			dst = appendStr8(dst, keys[i])
		}
	}
	return dst, true
}

// DecodePremadeReply decodes a premade reply (for Go clients and tests).
func DecodePremadeReply(frame []byte) (id uint32, code byte, gen uint32, picks []Premade, err error) {
	r, id, err := replyReader(frame, TypePremadeReply)
	if err != nil {
		return 0, 0, 0, nil, err
	}
	code = r.u8()
	gen = r.u32()
	n := int(r.u16())
	for i := 0; i < n && !r.bad; i++ {
		var p Premade
		flags := r.u8()
		p.Alternative, p.Own = flags&1 == 1, flags&4 != 0
		p.Backend = string(r.bytes(int(r.u8())))
		p.EWMAScore = math.Float64frombits(r.u64())
		nc := int(r.u8())
		for k := 0; k < nc && !r.bad; k++ {
			p.Candidates = append(p.Candidates, string(r.bytes(int(r.u8()))))
			if flags&2 != 0 {
				p.Keys = append(p.Keys, string(r.bytes(int(r.u8()))))
			}
		}
		picks = append(picks, p)
	}
	if r.bad || len(r.b) != 0 {
		return 0, 0, 0, nil, ErrShort
	}
	return id, code, gen, picks, nil
}

// replyReader checks a reply frame's length, version and type and returns a
// reader positioned after its id.
func replyReader(frame []byte, typ byte) (*reader, uint32, error) {
	if n, err := FrameLen(frame); err != nil || n == 0 || n != len(frame) {
		return nil, 0, ErrShort
	}
	r := &reader{b: frame[4:]}
	if r.u8() != Version || r.u8() != typ {
		return nil, 0, ErrType
	}
	id := r.u32()
	if r.bad {
		return nil, 0, ErrShort
	}
	return r, id, nil
}
