package probe

import "net/http"

// MaxFollowRedirects bounds FactoryOptions.FollowRedirects.
const MaxFollowRedirects = 10

// checkRedirect is the HTTP client's redirect policy. By default (pulsed's
// probes) a redirect is an answer like any other: its status is reported.
// Following it would also reach an address nobody checked when the target
// was added. A Factory made with FollowRedirects (pulsectl check, a one-shot
// check of URLs a person wrote) follows that many, each dialed through the
// egress policy, and reports the status of the last answer: the final page,
// or the redirect it stopped at.
func (f *Factory) checkRedirect(_ *http.Request, via []*http.Request) error {
	if len(via) > f.follow { // via holds the requests sent: one more than the redirects followed
		return http.ErrUseLastResponse
	}
	return nil
}
