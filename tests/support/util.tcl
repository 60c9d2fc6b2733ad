# util.tcl -- the test vocabulary: test, tags, assertions, waiting, helpers.
#
# A test is a named script. It passes when the script runs to the end, fails
# when an assertion (or anything else) raises an error, and is skipped when
# its tags are excluded or it calls `skip`. Every outcome prints one line
# ([ok] / [err] / [skip]) and bumps one counter; the runner adds them up.
#
# Assertions raise errors with errorcode ASSERTION so the report can tell a
# failed expectation ("Expected 'a' to equal 'b'") from a script bug (an
# exception, reported with its stack).

set ::num_passed 0
set ::num_failed 0
set ::num_skipped 0
set ::tags {}
set ::skip_reason {}
set ::cur_test {}
if {![info exists ::harness(verbose)]} { set ::harness(verbose) 0 }
if {![info exists ::harness(allowtags)]} { set ::harness(allowtags) {} }
if {![info exists ::harness(denytags)]} { set ::harness(denytags) {} }
if {![info exists ::harness(only)]} { set ::harness(only) {} }
if {![info exists ::harness(file)]} { set ::harness(file) {} }

# ---------------------------------------------------------------- reporting

proc __report__ {kind name {detail {}}} {
    switch -- $kind {
        ok   { incr ::num_passed }
        err  { incr ::num_failed }
        skip { incr ::num_skipped }
    }
    set line "\[$kind\] $name"
    if {$kind eq "skip" && $detail ne ""} {
        append line " ($detail)"
    }
    if {$kind eq "err" && $::harness(file) ne "" && [string first $::harness(file) $name] < 0} {
        append line " in $::harness(file)"
    }
    puts $line
    if {$kind eq "err" && $detail ne ""} {
        foreach l [split [string trimright $detail] "\n"] {
            puts "    $l"
        }
    }
    flush stdout
}

proc verbose_puts {msg} {
    if {$::harness(verbose)} { puts $msg; flush stdout }
}

# ------------------------------------------------------------------- tags

# tags {a b} { script }: tests inside carry these tags in addition to the
# enclosing ones.
proc tags {tags code} {
    set saved $::tags
    lappend ::tags {*}$tags
    set rc [catch {uplevel 1 $code} res opts]
    set ::tags $saved
    return -options $opts $res
}

# Why a test (or server block) with these tags must not run, or "" if it may.
proc __tags_skip_reason__ {tags {checkallow 1}} {
    foreach t $tags {
        if {$t in $::harness(denytags)} {
            if {[info exists ::harness(denywhy,$t)]} {
                return $::harness(denywhy,$t)
            }
            return "tag $t excluded"
        }
    }
    if {$checkallow && [llength $::harness(allowtags)]} {
        foreach t $::harness(allowtags) {
            if {$t in $tags} { return {} }
        }
        return "no tag among: $::harness(allowtags)"
    }
    return {}
}

# ------------------------------------------------------------------- test

# test name script ?expected?
# With expected, the script's result must equal it.
proc test {name code {expected __no_expected_value__}} {
    if {[llength $::harness(only)]} {
        set hit 0
        foreach p $::harness(only) {
            if {[string match $p $name]} { set hit 1; break }
        }
        if {!$hit} return
    }
    if {$::skip_reason ne ""} {
        __report__ skip $name $::skip_reason
        return
    }
    set why [__tags_skip_reason__ $::tags]
    if {$why ne ""} {
        __report__ skip $name $why
        return
    }
    set ::cur_test $name
    verbose_puts "--- $name"
    set t0 [clock milliseconds]
    set rc [catch {uplevel 1 $code} result opts]
    set elapsed [expr {[clock milliseconds] - $t0}]
    set failure {}
    if {$rc == 1} {
        set ec [dict get $opts -errorcode]
        if {[lindex $ec 0] eq "SKIP"} {
            __report__ skip $name $result
            set ::cur_test {}
            return
        } elseif {[lindex $ec 0] eq "ASSERTION"} {
            set failure $result
        } else {
            set failure "Exception: $result\n[__short_trace__ [dict get $opts -errorinfo]]"
        }
    } elseif {$expected ne "__no_expected_value__" && $result ne $expected} {
        set failure "Expected '[__show__ $result]' to equal '[__show__ $expected]'"
    }
    set died [__check_servers_alive__]
    if {$died ne ""} {
        if {$failure ne ""} { append failure "\n" }
        append failure $died
    }
    if {$failure eq ""} {
        if {$::harness(verbose)} {
            __report__ ok "$name ($elapsed ms)"
        } else {
            __report__ ok $name
        }
    } else {
        __report__ err $name $failure
    }
    set ::cur_test {}
}

# Called from within a test: stop it and report it as skipped.
proc skip {reason} {
    error $reason {} SKIP
}

# The useful part of a Tcl stack trace: the message line (already shown) and
# the frames inside this client/harness are dropped, at most 10 lines kept.
proc __short_trace__ {info} {
    set lines [lrange [split $info "\n"] 1 end]
    set frames {}
    set cur {}
    foreach l $lines {
        if {[regexp {^\s*(while executing|invoked from within)$} $l] && [llength $cur]} {
            lappend frames $cur
            set cur {}
        }
        lappend cur $l
    }
    if {[llength $cur]} { lappend frames $cur }
    set out {}
    foreach fr $frames {
        set text [join $fr "\n"]
        if {[regexp {::redis::|__dispatch__|\$c \{\*\}\$args|error \$rest|\(procedure "(r|fail|assert[a-z_]*|__[a-z_]+__)" line|uplevel 1 \$code|uplevel #0} $text]} continue
        lappend out {*}$fr
    }
    if {[llength $out] > 10} {
        set out [concat [lrange $out 0 9] [list "    ..."]]
    }
    return [join $out "\n"]
}

# A printable, bounded rendering of a (possibly binary, possibly huge) value.
proc __show__ {v} {
    set len [string length $v]
    set cut 0
    if {$len > 200} {
        set v [string range $v 0 159]
        set cut 1
    }
    if {[regexp {[^\x20-\x7e]} $v]} {
        set out {}
        foreach c [split $v {}] {
            scan $c %c n
            if {$n >= 0x20 && $n < 0x7f && $c ne "\\"} {
                append out $c
            } elseif {$c eq "\\"} {
                append out "\\\\"
            } else {
                append out [format "\\x%02x" [expr {$n & 0xff}]]
            }
        }
        set v $out
    }
    if {$cut} { append v "...($len bytes)" }
    return $v
}

# ------------------------------------------------------------- assertions

# Which assertion failed: the command that called into this file (with its
# file and line when Tcl knows them; inside test bodies it usually does not).
proc __assert_where__ {} {
    for {set level [expr {[info frame] - 1}]} {$level > 0} {incr level -1} {
        set f [info frame $level]
        if {[dict exists $f file] && [string match */support/*.tcl [dict get $f file]]} continue
        if {[dict get $f type] eq "proc"} continue
        set cmd [string trim [lindex [split [dict get $f cmd] "\n"] 0]]
        if {[string length $cmd] > 120} { set cmd "[string range $cmd 0 116]..." }
        set where {}
        if {[dict exists $f file]} {
            set where "[file tail [dict get $f file]]:[dict get $f line]: "
        }
        return "\n    at: $where$cmd"
    }
    return ""
}

proc fail {msg} {
    error "$msg[__assert_where__]" {} ASSERTION
}

proc assert {condition} {
    if {![uplevel 1 [list expr $condition]]} {
        set ctx {}
        catch {
            set subbed [uplevel 1 [list subst -nocommands $condition]]
            if {$subbed ne $condition} { set ctx " -> \[$subbed\]" }
        }
        fail "Expected \[$condition\]$ctx to be true"
    }
}

# For long values: where two strings first differ, and what is there.
proc __first_difference__ {a b} {
    set n [expr {min([string length $a], [string length $b])}]
    set i 0
    while {$i < $n && [string index $a $i] eq [string index $b $i]} { incr i }
    set from [expr {max(0, $i - 20)}]
    return "lengths [string length $a] and [string length $b], first difference at byte $i:\n      '[__show__ [string range $a $from [expr {$i + 60}]]]'\n  vs. '[__show__ [string range $b $from [expr {$i + 60}]]]'"
}

proc assert_equal {value expected {detail {}}} {
    if {$value ne $expected} {
        set m "Expected '[__show__ $value]' to equal '[__show__ $expected]'"
        if {[string length $value] > 200 || [string length $expected] > 200} {
            append m "\n  [__first_difference__ $value $expected]"
        }
        if {$detail ne ""} { append m " ($detail)" }
        fail $m
    }
}

proc assert_not_equal {value expected {detail {}}} {
    if {$value eq $expected} {
        set m "Expected '[__show__ $value]' to not equal '[__show__ $expected]'"
        if {$detail ne ""} { append m " ($detail)" }
        fail $m
    }
}

proc assert_match {pattern value {detail {}}} {
    if {![string match $pattern $value]} {
        set m "Expected '[__show__ $value]' to match '$pattern'"
        if {$detail ne ""} { append m " ($detail)" }
        fail $m
    }
}

proc assert_no_match {pattern value} {
    if {[string match $pattern $value]} {
        fail "Expected '[__show__ $value]' to not match '$pattern'"
    }
}

# assert_error pattern code: code must raise an error matching pattern.
proc assert_error {pattern code} {
    if {[catch {uplevel 1 $code} err]} {
        if {![string match $pattern $err]} {
            fail "Expected an error matching '$pattern' but got '[__show__ $err]'"
        }
    } else {
        fail "Expected an error matching '$pattern' but got '[__show__ $err]' (no error)"
    }
}

proc assert_range {value min max} {
    if {![string is double -strict $value] || $value < $min || $value > $max} {
        fail "Expected '$value' to be between $min and $max"
    }
}

proc assert_morethan {value than} {
    if {![string is double -strict $value] || $value <= $than} {
        fail "Expected '$value' to be more than '$than'"
    }
}

proc assert_morethan_equal {value than} {
    if {![string is double -strict $value] || $value < $than} {
        fail "Expected '$value' to be more than or equal to '$than'"
    }
}

proc assert_lessthan {value than} {
    if {![string is double -strict $value] || $value >= $than} {
        fail "Expected '$value' to be less than '$than'"
    }
}

proc assert_lessthan_equal {value than} {
    if {![string is double -strict $value] || $value > $than} {
        fail "Expected '$value' to be less than or equal to '$than'"
    }
}

# ---------------------------------------------------------------- waiting

# wait_for_condition maxtries delay_ms condition else fail-script
# Evaluates condition (an expr) up to maxtries times, delay_ms apart; runs
# the else script (normally a `fail`) if it never became true.
proc wait_for_condition {maxtries delay condition elseword elsescript} {
    if {$elseword ne "else"} {
        error "wait_for_condition: expected 'else', got '$elseword'"
    }
    for {set i 0} {$i < $maxtries} {incr i} {
        if {[uplevel 1 [list expr $condition]]} return
        after $delay
    }
    uplevel 1 $elsescript
}

# ------------------------------------------------------------ pub/sub

# read_with_timeout client ?ms?: the next reply or message of a deferring
# client, failing the test (not hanging the file) if none comes in time.
# Tcl reports a channel readable while its buffer holds bytes, so a message
# already read into the buffer is seen at once.
proc read_with_timeout {client {ms 5000}} {
    set chan [$client channel]
    set ::__rwt 0
    fileevent $chan readable {set ::__rwt 1}
    set timer [after $ms {set ::__rwt 2}]
    vwait ::__rwt
    after cancel $timer
    fileevent $chan readable {}
    if {$::__rwt == 2} { fail "no reply or message within $ms ms" }
    return [$client read]
}

# messages_until client sentinel ?publisher?: publishes "end" to the channel
# sentinel (which client must subscribe to) and returns every message the
# client got before it, as {kind channel payload} or {pmessage pattern
# channel payload}. Messages arrive in the order they were published, so
# everything an action caused is in the list, and a missing event is seen
# without waiting for a timeout.
proc messages_until {client sentinel {publisher r}} {
    $publisher publish $sentinel end
    set got {}
    while 1 {
        set m [read_with_timeout $client]
        if {[lindex $m 0] eq "message" && [lindex $m 1] eq $sentinel} break
        lappend got $m
    }
    return $got
}

# --------------------------------------------------------------- values

# randstring min max ?alpha|binary|compr?: a random byte string.
proc randstring {min max {type binary}} {
    set len [expr {$min + int(rand() * ($max - $min + 1))}]
    set out {}
    switch -- $type {
        alpha  { set lo 48; set hi 122 }
        compr  { set lo 48; set hi 52 }
        binary { set lo 0;  set hi 255 }
        default { error "randstring: unknown type $type" }
    }
    set span [expr {$hi - $lo + 1}]
    for {set i 0} {$i < $len} {incr i} {
        append out [format %c [expr {$lo + int(rand() * $span)}]]
    }
    return $out
}

# A deterministic byte pattern of exactly len bytes, cheap to build even for
# many MiB: the same block of all 256 byte values, tagged with seed so two
# patterns of the same length differ.
proc pattern_bytes {len {seed 0}} {
    set block {}
    for {set i 0} {$i < 256} {incr i} {
        append block [format %c [expr {($i * 7 + $seed) & 0xff}]]
    }
    set reps [expr {$len / 256 + 1}]
    return [string range [string repeat $block $reps] 0 [expr {$len - 1}]]
}

# The whole keyspace as a sorted flat list: key value key value...
# (strings only, which is all this server holds).
proc csvdump {{client r}} {
    set out {}
    foreach k [lsort [$client keys *]] {
        lappend out $k [$client get $k]
    }
    return $out
}

# ----------------------------------------------------------- server facts

# get_info_field client section field: one field of INFO section, or "".
proc get_info_field {client section field} {
    set info [$client info $section]
    if {[regexp -line "^$field:(.*)\r?$" $info -> v]} {
        return [string trim $v]
    }
    return {}
}

# s ?level? field: a field of the full INFO of the innermost (or level)
# server.
proc s {args} {
    set level 0
    if {[llength $args] == 2} {
        set level [lindex $args 0]
        set args [lrange $args 1 end]
    }
    set field [lindex $args 0]
    set info [r $level info all]
    if {[regexp -line "^$field:(.*)\r?$" $info -> v]} {
        return [string trim $v]
    }
    return {}
}

# debug_sleep seconds ?client?: block the server for that long.
proc debug_sleep {secs {client r}} {
    $client debug sleep $secs
}

# ---------------------------------------------------------- raw sockets

# raw_connect ?level?: a binary socket to the server, for sending bytes that
# a well-behaved client never would.
proc raw_connect {{level 0}} {
    set fd [socket [srv $level host] [srv $level port]]
    fconfigure $fd -translation binary -buffering none -blocking 1
    return $fd
}

# raw_read fd ?timeout_ms? ?idle_ms?: whatever arrives until the connection
# closes, timeout_ms passes, or idle_ms pass with nothing new after some data
# came. Returns {data closed}: closed is 1 when the server closed the socket.
proc raw_read {fd {timeout_ms 2000} {idle_ms 100}} {
    fconfigure $fd -blocking 0
    set data {}
    set closed 0
    set deadline [expr {[clock milliseconds] + $timeout_ms}]
    set last [clock milliseconds]
    while 1 {
        if {[catch {read $fd} chunk]} {
            set closed 1
            break
        }
        if {$chunk ne ""} {
            append data $chunk
            set last [clock milliseconds]
        } elseif {[eof $fd]} {
            set closed 1
            break
        }
        set now [clock milliseconds]
        if {$now >= $deadline} break
        if {$data ne "" && $now - $last >= $idle_ms} break
        after 5
    }
    fconfigure $fd -blocking 1
    return [list $data $closed]
}

# raw_send_recv bytes ?level? ?timeout_ms?: open a raw connection, send the
# bytes, read the answer; returns {data closed} as raw_read and closes.
proc raw_send_recv {bytes {level 0} {timeout_ms 2000}} {
    set fd [raw_connect $level]
    catch {puts -nonewline $fd $bytes; flush $fd}
    set res [raw_read $fd $timeout_ms]
    catch {close $fd}
    return $res
}

# raw_wait_closed fd ?timeout_ms?: 1 if the server closes fd within the
# timeout (anything it sent first is discarded), 0 otherwise.
proc raw_wait_closed {fd {timeout_ms 3000}} {
    fconfigure $fd -blocking 0
    set deadline [expr {[clock milliseconds] + $timeout_ms}]
    set closed 0
    while {[clock milliseconds] < $deadline} {
        if {[catch {read $fd} chunk] || ($chunk eq "" && [eof $fd])} {
            set closed 1
            break
        }
        after 10
    }
    catch {fconfigure $fd -blocking 1}
    return $closed
}

# ------------------------------------------------------------------ misc

# Is a process still running (a zombie counts as gone)?
proc process_is_alive {pid} {
    if {[file exists /proc]} {
        if {[catch {open /proc/$pid/stat r} f]} { return 0 }
        set stat [read $f]
        close $f
        # The state letter follows the ")" that closes the command name.
        set state [lindex [string range $stat [expr {[string last ")" $stat] + 2}] end] 0]
        return [expr {$state ne "Z" && $state ne "X"}]
    }
    return [expr {![catch {exec kill -0 $pid}]}]
}

# tmpfile prefix: a fresh path under tests/tmp.
proc tmpfile {prefix} {
    global harness
    incr ::__tmpfile_counter
    return [file join $harness(tmpdir) "$prefix.[pid].$::__tmpfile_counter"]
}
set ::__tmpfile_counter 0

# A program on PATH (or at an absolute path), or "" if there is none.
proc find_program {name} {
    if {[file pathtype $name] eq "absolute"} {
        return [expr {[file executable $name] ? $name : ""}]
    }
    set p [auto_execok $name]
    return [lindex $p 0]
}

# An argument of COMMAND DOCS reduced to what redis-cli reads for its
# help and hints: name, type, token, key_spec_index, flags (sorted),
# arguments (since, summary, display_text dropped: Redis has them,
# redis-cli's hints do not use them).
proc docs_shape {args} {
    set out {}
    foreach a $args {
        set d {}
        foreach f {name type token key_spec_index} {
            if {[dict exists $a $f]} { lappend d $f [dict get $a $f] }
        }
        if {[dict exists $a flags]} { lappend d flags [lsort [dict get $a flags]] }
        if {[dict exists $a arguments]} { lappend d arguments [docs_shape {*}[dict get $a arguments]] }
        lappend out $d
    }
    return $out
}

# Environment (for `exec env ...`) that lets /usr/bin/python3 load the
# binding's extension of a sanitizer build: the ASan/UBSan runtimes the
# extension was linked with are preloaded, and leak checking is off (the
# interpreter keeps its objects until exit). Empty for a normal build.
proc python_sanitizer_env {} {
    if {![info exists ::env(SANITIZER)] || $::env(SANITIZER) eq ""} { return {} }
    set libs {}
    foreach lib {libasan.so libubsan.so} {
        set p [exec gcc -print-file-name=$lib]
        if {[file exists $p]} { lappend libs $p }
    }
    return [list LD_PRELOAD=[join $libs :] ASAN_OPTIONS=detect_leaks=0:handle_segv=1:allow_user_segv_handler=1]
}

# One RESP multibulk request from chan, read whole (the server sends each
# request at once): its arguments, or {} at end of file. The stand-in
# segment hosts of migrate.tcl and relay.tcl read what the server sends them.
proc read_resp_request {chan} {
    if {[gets $chan line] < 0} { return {} }
    set argv {}
    set n [string range [string trimright $line "\r"] 1 end]
    for {set i 0} {$i < $n} {incr i} {
        gets $chan hdr
        set len [string range [string trimright $hdr "\r"] 1 end]
        lappend argv [read $chan $len]
        read $chan 2
    }
    return $argv
}

# Starts the server under test with args and waits (10 s at most) for it to
# exit, as a server refusing its configuration does. Returns {alive output}:
# alive is 1 if it was still running (then it is killed), output is what it
# printed. For tests of start-up refusals.
proc server_start_refusal {name args} {
    set log [tmpfile $name]
    set pid [exec $::harness(binary) {*}$args >& $log &]
    set deadline [expr {[clock milliseconds] + 10000}]
    while {[process_is_alive $pid] && [clock milliseconds] < $deadline} { after 20 }
    set alive [process_is_alive $pid]
    if {$alive} { catch {exec kill -9 $pid} }
    catch {exec true}
    set f [open $log r]
    set out [read $f]
    close $f
    return [list $alive $out]
}

# Returns once at least n full serverCron runs have happened since the call:
# a sentinel segment that UNMOUNT GRACEFUL 0 removes on the next tick
# (segmentCron), once per n. For "nothing happened" checks without waiting
# a time; DEBUG VISITS cron-ticks counts how many ran.
proc wait_cron_ticks {n {client r}} {
    for {set i 0} {$i < $n} {incr i} {
        $client mount cron-tick-sentinel 4096 OWNER cron-tick-sentinel
        assert_equal 0 [$client unmount cron-tick-sentinel graceful 0]
        wait_for_condition 100 20 {[$client segment.info cron-tick-sentinel] eq ""} else {
            fail "the sentinel segment was never unmounted by the cron"
        }
    }
}
