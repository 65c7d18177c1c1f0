package protocol

import (
	"fmt"

	"github.com/ipfs/go-cid"
	mh "github.com/multiformats/go-multihash"
)

// Version is the one integer protocol version; see the package comment for
// its history.
const Version = 1

// Stream protocols and the DHT prefix. The DHT prefix keeps GaaS off the
// public IPFS DHT.
const (
	DHTPrefix      = "/gaas"
	JobProtocol    = "/gaas/job/1.0.0"
	OfferProtocol  = "/gaas/offer/1.0.0"
	LedgerProtocol = "/gaas/ledger/1.0.0"
)

// Tier names. The coordinator's rate card says what each one costs.
const (
	TierStarter = "starter"
	TierPro     = "pro"
	TierMax     = "max"
)

// Tiers lists the tier names from smallest to largest.
var Tiers = []string{TierStarter, TierPro, TierMax}

// KnownTier reports whether name is one of Tiers.
func KnownTier(name string) bool {
	for _, t := range Tiers {
		if t == name {
			return true
		}
	}
	return false
}

// RateCardTopic is where the coordinator announces its signed rate card.
const RateCardTopic = "/gaas/ratecard/v1"

// JobTopic is the gossipsub topic on which job requests for a tier are
// published.
func JobTopic(tier string) string { return "/gaas/jobs/" + tier + "/v1" }

// TierKey is the DHT key under which providers of a tier advertise
// themselves: the CIDv1 (raw) of the SHA-256 of "gaas/tier/<tier>/v1".
func TierKey(tier string) cid.Cid {
	sum, err := mh.Sum([]byte(fmt.Sprintf("gaas/tier/%s/v1", tier)), mh.SHA2_256, -1)
	if err != nil {
		panic(err) // SHA2-256 is always available
	}
	return cid.NewCidV1(cid.Raw, sum)
}
