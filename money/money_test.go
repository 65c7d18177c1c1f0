package money

import (
	"math"
	"testing"
)

func TestCharge(t *testing.T) {
	for _, tc := range []struct {
		rate, secs, want int64
	}{
		{5000, 1, 1},        // ₹50/hr for 1 s = 1.38 paise → 1
		{5000, 3600, 5000},  // exactly an hour
		{5000, 7200, 10000}, // two hours
		{3000, 1, 0},        // under a paisa rounds down
		{0, 3600, 0},        // zero rate
		{12000, 59, 196},    // 196.66 → 196
		{math.MaxInt64, 3600, math.MaxInt64},
		{math.MaxInt64, 1, math.MaxInt64 / 3600},
	} {
		got, err := Charge(tc.rate, tc.secs)
		if err != nil || got != tc.want {
			t.Errorf("Charge(%d, %d) = %d, %v; want %d", tc.rate, tc.secs, got, err, tc.want)
		}
	}
	if _, err := Charge(math.MaxInt64, 3601); err != ErrOverflow {
		t.Errorf("Charge past int64 = %v, want ErrOverflow", err)
	}
	if _, err := Charge(-1, 1); err == nil {
		t.Error("negative rate accepted")
	}
}

func TestFee(t *testing.T) {
	for _, tc := range []struct{ charge, bps, want int64 }{
		{5000, 1000, 500},
		{6, 1000, 0},
		{19, 1000, 1},
		{math.MaxInt64, 10000, math.MaxInt64},
		{math.MaxInt64, 1000, math.MaxInt64 / 10},
	} {
		got, err := Fee(tc.charge, tc.bps)
		if err != nil || got != tc.want {
			t.Errorf("Fee(%d, %d) = %d, %v; want %d", tc.charge, tc.bps, got, err, tc.want)
		}
	}
	if _, err := Fee(1, 10001); err == nil {
		t.Error("fee over 100% accepted")
	}
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		p    int64
		want string
	}{
		{5000, "₹50"}, {6, "₹0.06"}, {12000050, "₹1,20,000.50"}, {-300, "-₹3"},
		{100000000, "₹10,00,000"}, {99999, "₹999.99"}, {0, "₹0"},
		{math.MinInt64, "-₹92,23,37,20,36,85,47,758.08"},
	} {
		if got := Format(tc.p); got != tc.want {
			t.Errorf("Format(%d) = %q, want %q", tc.p, got, tc.want)
		}
	}
	if got := FormatRate(5000); got != "₹50/hr" {
		t.Errorf("FormatRate = %q", got)
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{"500": 50000, "₹1,200.5": 120050, "0.06": 6, " 12.50 ": 1250} {
		got, err := Parse(in)
		if err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "1.234", "-5", "abc", "1.", ".5", "1e3", "99999999999999999999"} {
		if _, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) accepted", bad)
		}
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"500", "₹1,200.5", "0.06", "1.234", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err != nil {
			return
		}
		if p < 0 {
			t.Fatalf("Parse(%q) = %d, negative", s, p)
		}
		back, err := Parse(Format(p))
		if err != nil || back != p {
			t.Fatalf("Parse(Format(%d)) = %d, %v", p, back, err)
		}
	})
}
