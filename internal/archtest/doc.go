// Package archtest holds tests of the code's shape: every package says
// what it is for, and the low layers never import the high ones.
package archtest
