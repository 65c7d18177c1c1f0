// Package money is GaaS's arithmetic on integer paise (₹1 = 100 paise):
// charges, fees and display. Amounts never pass through floating point.
package money

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"strconv"
	"strings"
)

// ErrOverflow is returned when an amount would not fit in an int64.
var ErrOverflow = errors.New("amount too large")

// Charge is what s seconds cost at a rate in paise per hour:
// floor(rate × s / 3600), computed without overflow in the product.
func Charge(ratePerHour, seconds int64) (int64, error) {
	if ratePerHour < 0 || seconds < 0 {
		return 0, fmt.Errorf("negative rate or duration")
	}
	hi, lo := bits.Mul64(uint64(ratePerHour), uint64(seconds))
	if hi >= 3600 { // quotient would not fit in 64 bits
		return 0, ErrOverflow
	}
	q, _ := bits.Div64(hi, lo, 3600)
	if q > math.MaxInt64 {
		return 0, ErrOverflow
	}
	return int64(q), nil
}

// Fee is the platform's cut of a charge: floor(charge × bps / 10000).
func Fee(charge, basisPoints int64) (int64, error) {
	if charge < 0 || basisPoints < 0 || basisPoints > 10000 {
		return 0, fmt.Errorf("fee of %d basis points on %d paise is out of range", basisPoints, charge)
	}
	hi, lo := bits.Mul64(uint64(charge), uint64(basisPoints))
	q, _ := bits.Div64(hi, lo, 10000) // hi < 10000 since bps ≤ 10000
	return int64(q), nil
}

// Format shows paise as rupees: "₹50", "₹0.06", "₹1,20,000.50" (Indian
// digit grouping), "-₹3".
func Format(paise int64) string {
	sign := ""
	u := uint64(paise)
	if paise < 0 {
		sign = "-"
		u = uint64(-(paise + 1)) + 1 // safe for MinInt64
	}
	rupees, rest := u/100, u%100
	s := sign + "₹" + groupIndian(strconv.FormatUint(rupees, 10))
	if rest != 0 {
		s += fmt.Sprintf(".%02d", rest)
	}
	return s
}

// FormatRate shows a rate as "₹50/hr".
func FormatRate(paisePerHour int64) string { return Format(paisePerHour) + "/hr" }

// groupIndian puts commas in Indian style: the last three digits, then
// groups of two.
func groupIndian(d string) string {
	if len(d) <= 3 {
		return d
	}
	head, tail := d[:len(d)-3], d[len(d)-3:]
	var parts []string
	for len(head) > 2 {
		parts = append([]string{head[len(head)-2:]}, parts...)
		head = head[:len(head)-2]
	}
	if head != "" {
		parts = append([]string{head}, parts...)
	}
	return strings.Join(parts, ",") + "," + tail
}

// Parse reads a rupee amount such as "500", "₹1,200.5" or "0.06" into
// paise. More than two decimal places is an error, not a rounding.
func Parse(s string) (int64, error) {
	t := strings.TrimSpace(s)
	t = strings.TrimPrefix(t, "₹")
	t = strings.ReplaceAll(t, ",", "")
	whole, frac, hasFrac := strings.Cut(t, ".")
	if whole == "" || (hasFrac && (frac == "" || len(frac) > 2)) {
		return 0, fmt.Errorf("%q is not an amount in rupees (for example 500 or 12.50)", s)
	}
	r, err := strconv.ParseUint(whole, 10, 63)
	if err != nil {
		return 0, fmt.Errorf("%q is not an amount in rupees (for example 500 or 12.50)", s)
	}
	var p uint64
	if hasFrac {
		if len(frac) == 1 {
			frac += "0"
		}
		p, err = strconv.ParseUint(frac, 10, 8)
		if err != nil {
			return 0, fmt.Errorf("%q is not an amount in rupees (for example 500 or 12.50)", s)
		}
	}
	if r > (math.MaxInt64-p)/100 {
		return 0, ErrOverflow
	}
	return int64(r*100 + p), nil
}
