// Package fakeshared is a checker.Shared for tests to build fake shared
// registries on: embed Mirror, a replica that owns nothing, judges nothing
// and whose writes are refused, and override the methods a test needs.
package fakeshared

import (
	"context"
	"errors"

	"github.com/pulsehealth/pulse/checker"
	"github.com/pulsehealth/pulse/checker/outlier"
)

// ErrReadOnly is Mirror's answer to a write that is not fenced.
var ErrReadOnly = errors.New("fake shared registry: read only")

// Mirror is a shared registry in which this replica owns, judges and
// writes nothing: its checker shows only what the test applies
// (Checker.ApplyShared), as other replicas' writes. Its current revision
// is 0, so Checker.CatchUp never waits. Its zero value is ready to use.
type Mirror struct{}

var _ checker.Shared = Mirror{}

func (Mirror) Load() ([]checker.SharedTarget, uint64, error) { return nil, 0, nil }
func (Mirror) DeleteTarget(context.Context, string) (uint64, bool, error) {
	return 0, false, ErrReadOnly
}
func (Mirror) ProposeState(context.Context, checker.StateProposal) error { return checker.ErrFenced }
func (Mirror) Owns(string) bool                                          { return false }
func (Mirror) Owner(string) string                                       { return "" }
func (Mirror) ID() string                                                { return "" }
func (Mirror) Members() []string                                         { return nil }
func (Mirror) PutSpecs(context.Context, []checker.Spec) (uint64, int, error) {
	return 0, 0, ErrReadOnly
}
func (Mirror) ProposeGroup(context.Context, checker.GroupProposal) (uint64, error) {
	return 0, checker.ErrFenced
}
func (Mirror) PutGroupPolicy(context.Context, string, checker.GroupPolicy) (uint64, error) {
	return 0, ErrReadOnly
}
func (Mirror) LoadedGroups() []checker.SharedGroup                     { return nil }
func (Mirror) Vantages(string, int) []checker.Vantage                  { return nil }
func (Mirror) Self() checker.Vantage                                   { return checker.Vantage{} }
func (Mirror) Judges(string) bool                                      { return false }
func (Mirror) PutVantage(context.Context, checker.VantageRecord) error { return ErrReadOnly }
func (Mirror) LoadedVantages() []checker.VantageRecord                 { return nil }
func (Mirror) ProposeVerdict(context.Context, checker.VerdictProposal) error {
	return checker.ErrFenced
}
func (Mirror) PutOutcome(context.Context, string, checker.SharedOutcome, uint64) (uint64, *checker.SharedOutcome, error) {
	return 0, nil, ErrReadOnly
}
func (Mirror) PutOverload(context.Context, checker.ReplicaOverload) error { return nil }
func (Mirror) Overloads() []checker.ReplicaOverload                       { return nil }
func (Mirror) JudgesGroup(string) bool                                    { return false }
func (Mirror) PutSamples(context.Context, string, []outlier.Sample) error { return nil }
func (Mirror) PutOutliers(context.Context, outlier.Record) error          { return ErrReadOnly }
func (Mirror) LoadedOutliers() ([]outlier.Record, []outlier.Sample)       { return nil, nil }
func (Mirror) PutAnnouncement(context.Context, checker.Announcement) (uint64, error) {
	return 0, ErrReadOnly
}
func (Mirror) CurrentRevision(context.Context) (uint64, error) { return 0, nil }
func (Mirror) RequestProgress(context.Context) error           { return nil }
