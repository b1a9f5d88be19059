package config

import (
	"errors"
	"fmt"
	"strconv"
)

// Overrides are settings made by the program. They win over the
// environment: every non-nil field replaces the Config's value. Pointers
// tell "not set" from a zero value, so a program can also turn a setting
// off that the environment turned on; with Go 1.26's new(expr):
//
//	cfg, err := config.Load()
//	cfg, err = cfg.Apply(config.Overrides{NChannels: new(8), P2PDisable: new(false)})
//
// Algo and Proto take NCCL_ALGO and NCCL_PROTO's grammar.
type Overrides struct {
	Algo, Proto                           *string
	NChannels, MinNChannels, MaxNChannels *int
	BuffSize, LLBuffSize, LL128BuffSize   *int
	NetBuffSize                           *int // nil with BuffSize set: BuffSize
	NThreads, LL128NThreads               *int
	P2PDisable, SHMDisable, IBDisable     *bool
	SocketIfname                          *string
	SocketFamily                          *string
	HostID                                *string
	NVLSEnable                            *bool
	LaunchMode                            *LaunchMode
	Debug                                 *DebugLevel
	DebugSubsys                           *Subsys
	DebugFile                             *string
}

// Apply returns c with o's non-nil fields applied, checked as the
// environment's values are; errors name the field ("Overrides.NChannels").
func (c Config) Apply(o Overrides) (Config, error) {
	var errs []error
	ints := map[string]*int{
		"NChannels": o.NChannels, "MinNChannels": o.MinNChannels, "MaxNChannels": o.MaxNChannels,
		"BuffSize": o.BuffSize, "LLBuffSize": o.LLBuffSize, "LL128BuffSize": o.LL128BuffSize,
		"NetBuffSize": o.NetBuffSize,
		"NThreads":    o.NThreads, "LL128NThreads": o.LL128NThreads,
	}
	for _, s := range intSettings {
		p := ints[s.goName]
		if p == nil {
			continue
		}
		// 0 restores "chosen by the runtime" where that is the default.
		if *p == 0 && s.goName != "BuffSize" && s.goName != "NetBuffSize" && s.goName != "LLBuffSize" && s.goName != "LL128BuffSize" {
			*s.field(&c) = 0
			continue
		}
		if !s.ok(int64(*p)) {
			errs = append(errs, &SettingError{Name: "Overrides." + s.goName, Value: strconv.Itoa(*p), Want: s.want})
			continue
		}
		*s.field(&c) = *p
	}
	if o.BuffSize != nil && o.NetBuffSize == nil {
		c.NetBuffSize = c.BuffSize // BuffSize alone holds everywhere
	}
	setBool := func(dst *bool, p *bool) {
		if p != nil {
			*dst = *p
		}
	}
	setBool(&c.P2PDisable, o.P2PDisable)
	setBool(&c.SHMDisable, o.SHMDisable)
	setBool(&c.IBDisable, o.IBDisable)
	setBool(&c.NVLSEnable, o.NVLSEnable)
	if o.Algo != nil {
		sel, err := ParseAlgoSelection(*o.Algo)
		if err != nil {
			errs = append(errs, &SettingError{Name: "Overrides.Algo", Value: *o.Algo, Err: err})
		}
		c.Algo = sel
	}
	if o.Proto != nil {
		sel, err := ParseProtoSelection(*o.Proto)
		if err != nil {
			errs = append(errs, &SettingError{Name: "Overrides.Proto", Value: *o.Proto, Err: err})
		}
		c.Proto = sel
	}
	if o.SocketIfname != nil {
		c.SocketIfname = ParseIfnameFilter(*o.SocketIfname)
	}
	if o.SocketFamily != nil {
		if *o.SocketFamily == "" {
			c.SocketFamily = ""
		} else if f, err := ParseSocketFamily(*o.SocketFamily); err != nil {
			errs = append(errs, &SettingError{Name: "Overrides.SocketFamily", Value: *o.SocketFamily, Want: `"", AF_INET or AF_INET6`})
		} else {
			c.SocketFamily = f
		}
	}
	if o.HostID != nil {
		if err := checkHostID("Overrides.HostID", *o.HostID); err != nil {
			errs = append(errs, err)
		} else {
			c.HostID = *o.HostID
		}
	}
	if o.LaunchMode != nil {
		if *o.LaunchMode != LaunchParallel && *o.LaunchMode != LaunchGroup {
			errs = append(errs, &SettingError{Name: "Overrides.LaunchMode", Value: strconv.Itoa(int(*o.LaunchMode)), Want: "LaunchParallel or LaunchGroup"})
		} else {
			c.LaunchMode = *o.LaunchMode
		}
	}
	if o.Debug != nil {
		if *o.Debug < DebugNone || *o.Debug > DebugTrace {
			errs = append(errs, &SettingError{Name: "Overrides.Debug", Value: o.Debug.String(), Want: "DebugNone .. DebugTrace"})
		} else {
			c.Debug = *o.Debug
		}
	}
	if o.DebugSubsys != nil {
		c.DebugSubsys = *o.DebugSubsys
	}
	if o.DebugFile != nil {
		c.DebugFile = *o.DebugFile
	}
	if len(errs) == 0 {
		if err := c.checkChannels("Overrides."); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return c, nil
}
