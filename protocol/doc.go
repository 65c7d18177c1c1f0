// Package protocol is the GaaS wire format: every message peers exchange,
// its signed envelope, its framing on streams, and the protocol and topic
// names. Nothing outside this package encodes or decodes a wire message.
//
// Version history (bump Version on any incompatible change):
//
//	1 (2026-11-29): first version: job requests on gossipsub, offers and
//	  job streams, coordinator ledger requests.
package protocol
