// Package suggest finds what a mistyped command, flag or field was meant to be
// ("Did you mean ...?"), as cobra and kubectl do: the candidates closest to
// what was typed by Damerau-Levenshtein distance, within a bound that grows
// with the word. pulsectl and pulsed use it.
package suggest

import (
	"slices"
	"strings"
)

// editDistance is the optimal-string-alignment distance between a and b:
// insertions, deletions, substitutions and swaps of two adjacent
// characters each count 1.
func editDistance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}

// Closest returns the candidates closest to typed: those at the smallest
// distance, if it is at most 1 for words of up to 4 characters and 2 for
// longer ones; else those typed is a prefix of (3 characters or more), or
// that typed ends with after a dash ("grpc-listen": "listen").
// canonical maps a candidate to the name to suggest (an alias to its
// command); nil keeps candidates as they are. The result is sorted and
// has no duplicates.
func Closest(typed string, candidates []string, canonical func(string) string) []string {
	if canonical == nil {
		canonical = func(s string) string { return s }
	}
	limit := 1
	if len([]rune(typed)) > 4 {
		limit = 2
	}
	best, bestD := []string{}, limit+1
	for _, c := range candidates {
		d := editDistance(strings.ToLower(typed), c)
		switch {
		case d > limit:
		case d < bestD:
			best, bestD = []string{canonical(c)}, d
		case d == bestD:
			best = append(best, canonical(c))
		}
	}
	if len(best) == 0 && len([]rune(typed)) >= 3 {
		for _, c := range candidates {
			if strings.HasPrefix(c, typed) || strings.HasSuffix(typed, "-"+c) {
				best = append(best, canonical(c))
			}
		}
	}
	slices.Sort(best)
	return slices.Compact(best)
}
