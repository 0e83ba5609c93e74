package server

// ScrubMessage and SecretsOf are scrubMessage and secretsOf, for tests.
var (
	ScrubMessage = scrubMessage
	SecretsOf    = secretsOf
)
