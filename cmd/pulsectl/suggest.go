package main

import (
	"slices"
	"strings"
)

// Suggestions for mistyped commands and flags ("Did you mean ...?"), as
// cobra and kubectl make them: the candidates closest to what was typed by
// Damerau-Levenshtein distance, within a bound that grows with the word.

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

// suggest returns the candidates closest to typed: those at the smallest
// distance, if it is at most 1 for words of up to 4 characters and 2 for
// longer ones; else those typed is a prefix of (3 characters or more).
// canonical maps a candidate to the name to suggest (an alias to its
// command); nil keeps candidates as they are. The result is sorted and
// has no duplicates.
func suggest(typed string, candidates []string, canonical func(string) string) []string {
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
			if strings.HasPrefix(c, typed) {
				best = append(best, canonical(c))
			}
		}
	}
	slices.Sort(best)
	return slices.Compact(best)
}

// didYouMean is " Did you mean "a"?" or " Did you mean "a" or "b"?" for
// the suggestions, on a line of its own; "" when there are none.
func didYouMean(suggestions []string) string {
	if len(suggestions) == 0 {
		return ""
	}
	quoted := make([]string, len(suggestions))
	for i, s := range suggestions {
		quoted[i] = `"` + s + `"`
	}
	return "\nDid you mean " + orList(quoted) + "?"
}

// flagName is a flag as it is typed: -o for a one-letter flag, --name for
// the others.
func flagName(name string) string {
	if len(name) == 1 {
		return "-" + name
	}
	return "--" + name
}
