package dns

import mdns "github.com/miekg/dns"

// malformed reports whether r is not a query this server can answer:
// RFC 1035 allows any QDCOUNT, but no server answers other than exactly
// one question (and miekg/dns rejects the others before parsing, but
// not a header announcing a question the message then lacks), and RFC
// 6891 makes more than one OPT record, or one outside the additional
// section, a FORMERR.
func malformed(r *mdns.Msg) bool {
	if len(r.Question) != 1 {
		return true
	}
	opts := 0
	for _, sec := range [][]mdns.RR{r.Answer, r.Ns} {
		for _, rr := range sec {
			if rr.Header().Rrtype == mdns.TypeOPT {
				return true
			}
		}
	}
	for _, rr := range r.Extra {
		if rr.Header().Rrtype == mdns.TypeOPT {
			opts++
		}
	}
	return opts > 1
}

// formErr is the FORMERR answer to r: its ID and opcode, its question
// when it has exactly one, and no records, so that it is never larger
// than the query.
func formErr(r *mdns.Msg) *mdns.Msg {
	m := &mdns.Msg{MsgHdr: mdns.MsgHdr{Id: r.Id, Response: true, Opcode: r.Opcode, Rcode: mdns.RcodeFormatError}}
	if len(r.Question) == 1 {
		m.Question = r.Question
	}
	return m
}
