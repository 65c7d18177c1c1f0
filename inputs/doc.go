// Package inputs checks the three things a buyer gives a job before
// anything is stored or sent: the dataset (a CSV), the script (Python with
// a top-level main) and the packages (names with optional versions). Every
// check answers with a sentence a user can act on.
package inputs
