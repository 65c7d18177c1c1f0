package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/url"
	"time"

	qrcode "github.com/skip2/go-qrcode"
	"github.com/trisparc/gaas/node"
)

// printPairing prints a link (and its QR code) that pairs a phone on the
// same network with this node, with a token of its own the owner can
// revoke. A node whose API listens only on loopback cannot be reached
// from a phone: it says how to change that.
func printPairing(ctx context.Context, w io.Writer, n *node.Node) {
	u, err := url.Parse(n.APIURL())
	if err != nil {
		return
	}
	host, port, _ := net.SplitHostPort(u.Host)
	ip := net.ParseIP(host)
	if ip != nil && ip.IsLoopback() {
		fmt.Fprintln(w, "  pairing    the API listens on loopback only; to pair a phone on your network, start with --api 0.0.0.0:"+port)
		return
	}
	if ip == nil || ip.IsUnspecified() {
		if lan := lanAddress(); lan != "" {
			host = lan
		}
	}
	tok, err := n.CreateToken(ctx, "phone paired "+time.Now().Format("2006-01-02 15:04"))
	if err != nil {
		return
	}
	link := fmt.Sprintf("http://%s/#token=%s", net.JoinHostPort(host, port), tok.Secret)
	fmt.Fprintf(w, "  pair a phone on this network: %s\n", link)
	if qr, err := qrcode.New(link, qrcode.Medium); err == nil {
		fmt.Fprint(w, qr.ToSmallString(false))
	}
	fmt.Fprintf(w, "  (revoke it with DELETE /api/tokens/%s)\n", tok.ID)
}

// lanAddress is this machine's first private IPv4 address.
func lanAddress() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && ipn.IP.IsPrivate() {
			return ipn.IP.String()
		}
	}
	return ""
}
