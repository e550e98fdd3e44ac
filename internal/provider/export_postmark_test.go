package provider

// DecodePostmarkProbe exposes the decoding of Postmark's outbound search
// answer to the tests of the documented example payloads.
func DecodePostmarkProbe(raw []byte, id string) (ProbeResult, error) {
	matches, receipt, err := decodePostmarkSearch(raw, id)
	return ProbeResult{Found: matches > 0, Matches: matches, Raw: raw, Receipt: receipt}, err
}

// DecodeMailjetProbe exposes the decoding of Mailjet's message list.
func DecodeMailjetProbe(raw []byte) (ProbeResult, error) {
	matches, receipt, err := decodeMailjetMessages(raw)
	return ProbeResult{Found: matches > 0, Matches: matches, Raw: raw, Receipt: receipt}, err
}
