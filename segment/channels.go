package segment

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// ChannelSlowOrdered is the older Java service's name for its MySQL strict
// channel. It is served by the ORDERED strategy, so a business's channel
// list treats it as ORDERED: listing either lists both.
const ChannelSlowOrdered Channel = 3

// MaxBizChannels is the most channels one business may serve (the three
// built-ins and a few custom strategies of package ext).
const MaxBizChannels = 16

// A business serves the channels of Biz.Channels and refuses the others.
// The rule that keeps its outputs from colliding (issue 30, item 7):
//
//   - Plain integer businesses may list any channels. Each channel keeps
//     its own guarantee (ORDERED numbers are unique per sub key only, and
//     the same integers as UNORDERED's): listing several is the operator's
//     explicit choice, and callers can only pick among those.
//   - Obfuscated and code businesses hand out opaque values whose one
//     promise is that they never repeat, and the same number maps to the
//     same value whichever channel produced it. They serve exactly one
//     channel, or UNORDERED and SNOWFLAKE together: those two never share
//     a number, since UNORDERED (and the snowflake fallback) draw from the
//     business's one segment counter, kept below the snowflake floor, and
//     snowflake IDs are at or above it. ORDERED restarts at start_num on
//     every sub key, so it overlaps both; a custom strategy's numbers are
//     unknown. A permutation keyed per channel would not help: two
//     bijections of overlapping inputs can still meet.
//   - Once such a business has issued, its channels may change only
//     within the same number space (ErrOutputLocked otherwise).

// numberSpace names where a channel's numbers come from: channels of one
// space share a counter (or disjoint counters) and never repeat each
// other's numbers; channels of different spaces may.
func numberSpace(ch Channel) Channel {
	switch ch {
	case ChannelUnordered, ChannelSnowflake:
		// The segment counter (below the floor) and snowflake (at or
		// above it): disjoint by construction.
		return ChannelUnordered
	case ChannelSlowOrdered:
		return ChannelOrdered
	}
	return ch
}

// CanonicalChannel maps SLOW_ORDERED to ORDERED, the name channel lists
// use (one channel in a list).
func CanonicalChannel(ch Channel) Channel {
	if ch == ChannelSlowOrdered {
		return ChannelOrdered
	}
	return ch
}

// Serves reports whether b hands out numbers on ch. It is the per-request
// check of the issuer; it re-applies the rule for non-plain businesses
// rather than trusting the stored list alone, so a row edited by hand (or
// by an older node during a rolling upgrade) cannot widen what an
// obfuscated business serves.
func (b Biz) Serves(ch Channel) bool {
	ch = CanonicalChannel(ch)
	if len(b.Channels) == 0 {
		return ch == CanonicalChannel(b.Channel)
	}
	if !slices.Contains(b.Channels, ch) {
		return false
	}
	return b.PlainOutput() || numberSpace(ch) == numberSpace(b.Channel)
}

// ChannelName names one channel as idctl and the channel lists do
// ("ordered"; custom channels and SLOW_ORDERED by number).
func ChannelName(ch Channel) string {
	if ch >= ChannelUnordered && ch <= ChannelSnowflake {
		return ch.String()
	}
	return strconv.Itoa(int(ch))
}

// ChannelNames returns channels as the names used by idctl
// ("unordered,ordered"; custom ones by number).
func ChannelNames(chs []Channel) string {
	names := make([]string, len(chs))
	for i, ch := range chs {
		names[i] = ChannelName(ch)
	}
	return strings.Join(names, ",")
}

// ParseChannel reads a channel name (unordered, ordered, snowflake,
// slow_ordered) or number (0..127, custom strategies included).
func ParseChannel(s string) (Channel, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "unordered":
		return ChannelUnordered, nil
	case "ordered":
		return ChannelOrdered, nil
	case "snowflake":
		return ChannelSnowflake, nil
	case "slow_ordered":
		return ChannelSlowOrdered, nil
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 || n > 127 {
		return 0, fmt.Errorf("%w: channel %q: want unordered, ordered, snowflake, slow_ordered or a number 0..127", ErrInvalid, s)
	}
	return Channel(n), nil
}

// ParseChannels reads a comma-separated channel list ("unordered,snowflake").
func ParseChannels(s string) ([]Channel, error) {
	var out []Channel
	for _, f := range strings.Split(s, ",") {
		if strings.TrimSpace(f) == "" {
			continue
		}
		ch, err := ParseChannel(f)
		if err != nil {
			return nil, err
		}
		out = append(out, ch)
	}
	return out, nil
}

// normalizeChannels returns chs with SLOW_ORDERED as ORDERED, def added,
// sorted and without repeats; negative values are kept for validation to
// name.
func normalizeChannels(chs []Channel, def Channel) []Channel {
	out := make([]Channel, 0, len(chs)+1)
	for _, ch := range chs {
		out = append(out, CanonicalChannel(ch))
	}
	out = append(out, CanonicalChannel(def))
	slices.Sort(out)
	return slices.Compact(out)
}

// validateChannels checks b.Channels (normalized) against the rule above.
func validateChannels(b Biz) error {
	if len(b.Channels) > MaxBizChannels {
		return fmt.Errorf("%w: biz %q: %d channels, at most %d", ErrInvalid, b.Name, len(b.Channels), MaxBizChannels)
	}
	for _, ch := range b.Channels {
		if ch < 0 {
			return fmt.Errorf("%w: biz %q: channel %d in channels: want 0..127", ErrInvalid, b.Name, ch)
		}
	}
	if b.PlainOutput() {
		return nil
	}
	for _, ch := range b.Channels {
		if numberSpace(ch) != numberSpace(b.Channel) {
			return fmt.Errorf("%w: biz %q: an obfuscated or code business serves one channel (or unordered and snowflake together, which never share a number), not %s: its values must never repeat, and %s numbers overlap %s's: list only its own channel (idctl biz create|update --channels), or use one business per channel",
				ErrInvalid, b.Name, ChannelNames(b.Channels), ChannelName(ch), ChannelName(b.Channel))
		}
	}
	return nil
}

// StoredChannels is the channel list of a business as a store reads it
// back. A business stored before channel lists existed (stored is empty)
// was served on every channel a caller named: a plain one keeps the
// built-in channels (UNORDERED, ORDERED and SNOWFLAKE), so its callers
// keep working after the upgrade (narrow it with 'idctl biz update
// --channels'); an obfuscated or code one gets its own channel only, since
// its values would repeat across channels. A stored list is returned
// normalized (sorted, the default among it). Every store applies this
// rule when it decodes a business.
func StoredChannels(stored []Channel, b Biz) []Channel {
	if len(stored) > 0 {
		// As NormalizeBiz keeps it (a list edited by hand may lack the
		// default or repeat a channel).
		return normalizeChannels(stored, b.Channel)
	}
	if b.PlainOutput() {
		return []Channel{ChannelUnordered, ChannelOrdered, ChannelSnowflake}
	}
	return []Channel{CanonicalChannel(b.Channel)}
}

// applyChannelUpdate sets b's default channel and channel list from u. A
// new default without a new list replaces the old default when that was
// all the business served (a business of one channel stays one), and is
// added to the list otherwise.
func applyChannelUpdate(b Biz, u BizUpdate) Biz {
	chs := slices.Clone(b.Channels)
	switch {
	case u.Channels != nil:
		chs = slices.Clone(*u.Channels)
	case u.Channel != nil && len(chs) == 1 && chs[0] == CanonicalChannel(b.Channel):
		chs = nil
	}
	if u.Channel != nil {
		b.Channel = *u.Channel
	}
	b.Channels = normalizeChannels(chs, b.Channel)
	return b
}

// channelsLocked refuses a change of a non-plain business's channels that
// would serve a number space it did not serve when it had issued: the new
// channel's numbers would map to values already handed out.
func channelsLocked(old, b Biz) error {
	if !old.Issued || b.PlainOutput() {
		return nil
	}
	was := StoredChannels(old.Channels, old)
	for _, ch := range b.Channels {
		if !slices.ContainsFunc(was, func(o Channel) bool { return numberSpace(o) == numberSpace(ch) }) {
			return fmt.Errorf("%w: biz %q has already issued values on %s, and %s numbers would repeat them: keep its channels, or create a new business for %s",
				ErrOutputLocked, b.Name, ChannelNames(was), ChannelName(ch), ChannelName(ch))
		}
	}
	return nil
}
