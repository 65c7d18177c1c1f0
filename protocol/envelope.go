package protocol

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
)

// MaxMessageSize bounds one encoded envelope. Log lines are cut well below
// it; nothing legitimate comes near.
const MaxMessageSize = 256 << 10

// Envelope carries one message, signed by the peer that wrote it.
type Envelope struct {
	Version int             `json:"v"`
	Kind    string          `json:"kind"`
	Body    json.RawMessage `json:"body"`
	Signer  string          `json:"signer"`
	Sig     []byte          `json:"sig"`
}

// Errors from decoding and verifying envelopes.
var (
	ErrTooLarge    = errors.New("message larger than the protocol allows")
	ErrBadVersion  = errors.New("message from an unsupported protocol version")
	ErrUnknownKind = errors.New("message of an unknown kind")
	ErrBadSig      = errors.New("message signature does not verify")
)

// signedBytes is what a signature covers: a domain tag, the version, the
// kind and the body, so a signature can never be reused for another kind.
func signedBytes(version int, kind string, body []byte) []byte {
	b := make([]byte, 0, len(body)+len(kind)+32)
	b = append(b, "gaas-envelope/"...)
	b = binary.AppendUvarint(b, uint64(version))
	b = binary.AppendUvarint(b, uint64(len(kind)))
	b = append(b, kind...)
	return append(b, body...)
}

// Seal signs m with key.
func Seal(key crypto.PrivKey, m Message) (Envelope, error) {
	body, err := json.Marshal(m)
	if err != nil {
		return Envelope{}, fmt.Errorf("encoding %s: %w", m.Kind(), err)
	}
	id, err := peer.IDFromPrivateKey(key)
	if err != nil {
		return Envelope{}, err
	}
	sig, err := key.Sign(signedBytes(Version, m.Kind(), body))
	if err != nil {
		return Envelope{}, fmt.Errorf("signing %s: %w", m.Kind(), err)
	}
	return Envelope{Version: Version, Kind: m.Kind(), Body: body, Signer: id.String(), Sig: sig}, nil
}

// Open verifies an envelope's signature and decodes its message, returned
// as a pointer to its type (*Offer, *Log, ...). The returned peer is the
// signer, whose key is embedded in its peer ID.
func Open(env Envelope) (Message, peer.ID, error) {
	if env.Version != Version {
		return nil, "", fmt.Errorf("%w: %d (this peer speaks %d)", ErrBadVersion, env.Version, Version)
	}
	m, ok := newMessage(env.Kind)
	if !ok {
		return nil, "", fmt.Errorf("%w: %q", ErrUnknownKind, env.Kind)
	}
	signer, err := peer.Decode(env.Signer)
	if err != nil {
		return nil, "", fmt.Errorf("%w: bad signer: %v", ErrBadSig, err)
	}
	pub, err := signer.ExtractPublicKey()
	if err != nil {
		return nil, "", fmt.Errorf("%w: signer's key is not in its peer ID", ErrBadSig)
	}
	ok, err = pub.Verify(signedBytes(env.Version, env.Kind, env.Body), env.Sig)
	if err != nil || !ok {
		return nil, "", ErrBadSig
	}
	if err := json.Unmarshal(env.Body, m); err != nil {
		return nil, "", fmt.Errorf("decoding %s: %w", env.Kind, err)
	}
	return m, signer, nil
}

// Marshal encodes a sealed envelope for gossipsub.
func Marshal(env Envelope) ([]byte, error) { return json.Marshal(env) }

// Unmarshal decodes, verifies and opens an envelope received whole (from
// gossipsub).
func Unmarshal(data []byte) (Message, peer.ID, error) {
	if len(data) > MaxMessageSize {
		return nil, "", ErrTooLarge
	}
	var env Envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return nil, "", fmt.Errorf("decoding envelope: %w", err)
	}
	return Open(env)
}

// Conn reads and writes length-prefixed envelopes on a stream. Messages
// are signed with the local key on write and verified on read.
type Conn struct {
	key crypto.PrivKey
	r   *bufio.Reader
	mu  sync.Mutex // Send may be called from several goroutines
	w   io.Writer
}

// NewConn wraps a stream (a libp2p stream, or one end of a pipe in tests).
func NewConn(rw io.ReadWriter, key crypto.PrivKey) *Conn {
	return &Conn{key: key, r: bufio.NewReader(rw), w: rw}
}

// Send seals m and writes it as one frame.
func (c *Conn) Send(m Message) error {
	env, err := Seal(c.key, m)
	if err != nil {
		return err
	}
	return c.SendEnvelope(env)
}

// SendEnvelope writes an already sealed envelope.
func (c *Conn) SendEnvelope(env Envelope) error {
	data, err := json.Marshal(env)
	if err != nil {
		return err
	}
	if len(data) > MaxMessageSize {
		return ErrTooLarge
	}
	frame := binary.AppendUvarint(make([]byte, 0, len(data)+binary.MaxVarintLen64), uint64(len(data)))
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err = c.w.Write(append(frame, data...))
	return err
}

// ReceiveEnvelope reads one frame without opening it.
func (c *Conn) ReceiveEnvelope() (Envelope, error) {
	n, err := binary.ReadUvarint(c.r)
	if err != nil {
		return Envelope{}, err
	}
	if n > MaxMessageSize {
		return Envelope{}, ErrTooLarge
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(c.r, data); err != nil {
		return Envelope{}, err
	}
	var env Envelope
	if err := json.Unmarshal(data, &env); err != nil {
		return Envelope{}, fmt.Errorf("decoding envelope: %w", err)
	}
	return env, nil
}

// Receive reads, verifies and opens one message.
func (c *Conn) Receive() (Message, peer.ID, Envelope, error) {
	env, err := c.ReceiveEnvelope()
	if err != nil {
		return nil, "", env, err
	}
	m, signer, err := Open(env)
	return m, signer, env, err
}
