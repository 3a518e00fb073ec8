package picksock

import (
	"encoding/binary"
	"math"

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
}

// wireKey is the key template as sent: a sticky table sends its cookie name
// as a single literal.
func wireKey(t balancer.HashTable) []balancer.KeyPart {
	if t.Kind == balancer.TableHash || t.Kind == balancer.TableSubset {
		return t.Key
	}
	return []balancer.KeyPart{{Lit: t.Cookie}}
}

// peerKeysBytes is the size of a persistent table's peer keys on the wire.
func peerKeysBytes(t balancer.HashTable) int {
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
		tableFixed-4+kb+pk > MaxFrame || t.Kind == balancer.TableStickyPersistent && len(t.PeerKeys) != npeers) {
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
}

// premadeEntry appends one premade pick, or returns dst unchanged and false
// when it would make the frame that starts at start longer than MaxFrame.
func premadeEntry(dst []byte, start int, picks []balancer.Pick) ([]byte, bool) {
	first := &picks[0]
	size := 1 + 1 + min(len(first.Backend), 255) + 8 + 1
	for i := range picks {
		size += 1 + min(len(picks[i].Peer), 255)
	}
	if len(dst)-start-4+size > MaxFrame {
		return dst, false
	}
	flags := byte(0)
	if first.Alternative {
		flags = 1
	}
	dst = append(dst, flags)
	dst = appendStr8(dst, first.Backend)
	dst = binary.BigEndian.AppendUint64(dst, math.Float64bits(first.EWMAScore))
	dst = append(dst, byte(len(picks)))
	for i := range picks {
		dst = appendStr8(dst, picks[i].Peer)
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
		p.Alternative = r.u8()&1 == 1
		p.Backend = string(r.bytes(int(r.u8())))
		p.EWMAScore = math.Float64frombits(r.u64())
		nc := int(r.u8())
		for k := 0; k < nc && !r.bad; k++ {
			p.Candidates = append(p.Candidates, string(r.bytes(int(r.u8()))))
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
	if n, err := FrameLen(frame); err != nil || n != len(frame) {
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
