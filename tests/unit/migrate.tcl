# DUMP, RESTORE, RESTORE-ASKING and MIGRATE (src/migrate.c, src/dump.c).
#
# The payload format is checked from outside: payloads are built here in
# Tcl (crc64 below is CRC64/Jones, as Redis's) and compared with what DUMP
# says, so a bad-format payload with a *valid* CRC can be forged and the
# parser's structural checks reached. Every refused RESTORE is checked to
# change nothing.
#
# MIGRATE runs between nested servers (`r -1` the source, `r` the target),
# and against stand-ins that live in this test process's event loop: a
# target that never answers or answers nonsense, and a segment host (what
# libmooncake's mc_host runs for a mounted segment) that serves SEG.READ, so
# DUMP and MIGRATE of a value held only in a mounted segment are covered.
# A request whose server side talks to such a stand-in must be sent with a
# deferring client and the event loop run (vwait) until the stand-in has
# answered: the server blocks on it, and the stand-in needs this process.

# ---- payloads built by hand -------------------------------------------------

proc crc64 {data} {
    if {![info exists ::crc64tab]} {
        for {set i 0} {$i < 256} {incr i} {
            set d $i
            for {set b 0} {$b < 8} {incr b} {
                set d [expr {($d & 1) ? (($d >> 1) ^ 0x95ac9329ac4bc9b5) : ($d >> 1)}]
            }
            lappend ::crc64tab $d
        }
    }
    set crc 0
    binary scan $data cu* bytes
    foreach b $bytes {
        set crc [expr {[lindex $::crc64tab [expr {($crc ^ $b) & 0xff}]] ^ ($crc >> 8)}]
    }
    return $crc
}

# body + version (0x434D, "MC") + CRC64 of both, as dump.h lays it out.
proc payload_seal {body {version 0x434D}} {
    set v [binary format s $version]
    return "$body$v[binary format w [crc64 $body$v]]"
}

# A STRING body: type 0, u64 length, the bytes. declared overrides the length.
proc string_body {value {declared {}}} {
    if {$declared eq {}} { set declared [string length $value] }
    return "[binary format c 0][binary format w $declared]$value"
}

# An OBJECT body: type 1, flags (1 hard pin, 2 checksum), created ms,
# soft pin ms left, [checksum], length, bytes.
proc object_body {value flags created pinms {checksum {}}} {
    set b "[binary format c 1][binary format c $flags][binary format w $created][binary format w $pinms]"
    if {$flags & 2} { append b "[binary format i [string length $checksum]]$checksum" }
    append b "[binary format w [string length $value]]$value"
    return $b
}

proc flip_byte {s i} {
    binary scan [string index $s $i] cu b
    return [string replace $s $i $i [format %c [expr {$b ^ 0x20}]]]
}

proc istore {field {client r}} { get_info_field $client store $field }
proc istore_stat {field} {
    if {![regexp -line "^$field:(.*)\r?$" [r -1 info stats] -> v]} { fail "no $field in INFO stats" }
    return [string trim $v]
}

# ---- stand-ins in this process ----------------------------------------------

# A segment host serving SEG.READ from ::fakehost(mem) (1 MiB of
# pattern_bytes: whatever offset the server chose, the bytes there are known).
# mode "error" refuses every read. ::fakehost(served) counts answers to
# SEG.READ; ::fakehost(argvs) keeps every request whole.
proc fakehost_start {} {
    set ::fakehost(mem) [pattern_bytes 1048576 11]
    set ::fakehost(served) 0
    set ::fakehost(mode) ok
    set ::fakehost(requests) {}
    set ::fakehost(argvs) {}
    set ::fakehost(listener) [socket -server fakehost_accept -myaddr 127.0.0.1 0]
    return [lindex [fconfigure $::fakehost(listener) -sockname] 2]
}

proc fakehost_stop {} {
    catch {close $::fakehost(listener)}
    foreach ch [array names ::fakehost_conns] { catch {close $ch} }
    array unset ::fakehost_conns
}

proc fakehost_accept {chan addr port} {
    set ::fakehost_conns($chan) 1
    fconfigure $chan -translation binary -blocking 1 -buffering full
    fileevent $chan readable [list fakehost_serve $chan]
}

proc fakehost_serve {chan} {
    if {[catch {read_resp_request $chan} argv] || $argv eq {}} {
        catch {close $chan}
        unset -nocomplain ::fakehost_conns($chan)
        return
    }
    lappend ::fakehost(requests) [string toupper [lindex $argv 0]]
    lappend ::fakehost(argvs) $argv
    switch -- [string toupper [lindex $argv 0]] {
        AUTH { puts -nonewline $chan "+OK\r\n" }
        SEG.AUTH { puts -nonewline $chan "+OK\r\n" }
        SEG.READ {
            lassign $argv _ seg off len
            if {$::fakehost(mode) eq "error"} {
                puts -nonewline $chan "-ERR range is outside the segment\r\n"
            } else {
                set data [string range $::fakehost(mem) $off [expr {$off + $len - 1}]]
                puts -nonewline $chan "\$[string length $data]\r\n$data\r\n"
            }
        }
        default { puts -nonewline $chan "-ERR unknown command for a hosted segment\r\n" }
    }
    flush $chan
    # SEG.AUTH (or AUTH) comes first on a connection, pipelined with the
    # read: the read's answer is what a test waits for.
    if {[string toupper [lindex $argv 0]] eq "SEG.READ"} { incr ::fakehost(served) }
}

# Runs this process's event loop until var reaches n (or 5 s pass).
proc wait_var {var n} {
    set id [after 5000 [list set $var timeout]]
    while {[set $var] ne "timeout" && [set $var] < $n} { vwait $var }
    after cancel $id
    if {[set $var] eq "timeout"} { fail "the stand-in was not reached" }
}

# A MIGRATE target that answers every request with `answer`.
proc faketarget_start {answer} {
    set ::faketarget(answer) $answer
    set ::faketarget(served) 0
    set ::faketarget(listener) [socket -server faketarget_accept -myaddr 127.0.0.1 0]
    return [lindex [fconfigure $::faketarget(listener) -sockname] 2]
}

proc faketarget_accept {chan addr port} {
    set ::faketarget_conns($chan) 1
    fconfigure $chan -translation binary -blocking 1 -buffering full
    fileevent $chan readable [list faketarget_serve $chan]
}

proc faketarget_serve {chan} {
    if {[catch {read_resp_request $chan} argv] || $argv eq {}} {
        catch {close $chan}
        return
    }
    puts -nonewline $chan $::faketarget(answer)
    flush $chan
    incr ::faketarget(served)
}

proc faketarget_stop {} {
    catch {close $::faketarget(listener)}
    foreach ch [array names ::faketarget_conns] { catch {close $ch} }
    array unset ::faketarget_conns
}

# ---------------------------------------------------------------------------
# DUMP and RESTORE on one server.
# ---------------------------------------------------------------------------

start_server {tags {mooncake migrate} overrides {segment-size 16mb}} {

    test {DUMP of a SET value is the documented payload} {
        r set d:1 hello
        assert_equal [payload_seal [string_body hello]] [r dump d:1]
        r set d:empty ""
        assert_equal [payload_seal [string_body ""]] [r dump d:empty]
    }

    test {DUMP of a missing key is nil} {
        assert_equal {} [r dump d:nothing]
        assert_equal {$-1} [r lastheader]
    }

    test {DUMP / RESTORE round trip: binary, empty and 1 MiB+ values} {
        set bin {}
        for {set i 0} {$i < 256} {incr i} { append bin [format %c $i] }
        append bin "\r\n\x00$bin"
        set big [pattern_bytes [expr {1048576 + 4321}] 5]
        foreach {k v} [list rt:bin $bin rt:empty "" rt:big $big rt:small x] {
            r set $k $v
            set p [r dump $k]
            r del $k
            assert_equal OK [r restore $k 0 $p]
            assert_equal $v [r get $k] "restored $k"
            assert_equal -1 [r pttl $k]
        }
    }

    test {RESTORE keeps a relative TTL; 0 means none} {
        r set ttl:1 v
        set p [r dump ttl:1]
        assert_equal OK [r restore ttl:2 5000 $p]
        assert_range [r pttl ttl:2] 4000 5000
        assert_equal OK [r restore ttl:3 0 $p]
        assert_equal -1 [r pttl ttl:3]
    }

    test {RESTORE ABSTTL: a future time is kept, a past one creates nothing} {
        r set abs:src v
        set p [r dump abs:src]
        set at [expr {[clock milliseconds] + 20000}]
        assert_equal OK [r restore abs:1 $at $p ABSTTL]
        assert_range [r pttl abs:1] 15000 20000
        assert_equal OK [r restore abs:2 [expr {[clock milliseconds] - 1000}] $p ABSTTL]
        assert_equal 0 [r exists abs:2]
        # Over an existing key with REPLACE the old value goes (Redis does so).
        r set abs:3 old
        assert_equal OK [r restore abs:3 1 $p ABSTTL REPLACE]
        assert_equal 0 [r exists abs:3]
    }

    test {RESTORE over an existing key: BUSYKEY, or REPLACE} {
        r set busy:1 old
        r pexpire busy:1 100000
        r set busy:src new
        set p [r dump busy:src]
        assert_error {BUSYKEY Target key name already exists.} {r restore busy:1 0 $p}
        assert_equal old [r get busy:1]
        assert_morethan [r pttl busy:1] 0
        assert_equal OK [r restore busy:1 0 $p REPLACE]
        assert_equal new [r get busy:1]
        # The old TTL does not survive a REPLACE.
        assert_equal -1 [r pttl busy:1]
        # RESTORE-ASKING is the same command (for cluster migrations).
        assert_equal OK [r restore-asking busy:2 0 $p]
        assert_equal new [r get busy:2]
    }

    test {RESTORE argument errors as Redis's, and nothing created} {
        r set arg:src v
        set p [r dump arg:src]
        assert_error {ERR Invalid TTL value, must be >= 0} {r restore arg:1 -1 $p}
        assert_error {ERR value is not an integer*} {r restore arg:1 abc $p}
        assert_error {ERR syntax error*} {r restore arg:1 0 $p BOGUS}
        assert_error {ERR Invalid IDLETIME value*} {r restore arg:1 0 $p IDLETIME -1}
        assert_error {ERR Invalid FREQ value*} {r restore arg:1 0 $p FREQ 256}
        # IDLETIME and FREQ exclude each other.
        assert_error {ERR syntax error*} {r restore arg:1 0 $p IDLETIME 1 FREQ 1}
        assert_error {*wrong number of arguments*} {r restore arg:1 0}
        assert_equal 0 [r exists arg:1]
        # IDLETIME sets the LRU clock (ms, 32 bits) that far back.
        assert_equal OK [r restore arg:2 0 $p IDLETIME 1000]
        assert_equal OK [r restore arg:3 0 $p FREQ 5]
        regexp {lru:(\d+)} [r debug object arg:2] -> lru2
        regexp {lru:(\d+)} [r debug object arg:3] -> lru3
        assert_range [expr {($lru3 - $lru2) & 0xffffffff}] 1000000 1005000
    }

    test {Damaged payloads are refused and change nothing} {
        r set bad:src [pattern_bytes 5000 2]
        r set bad:keep untouched
        set p [r dump bad:src]
        set n0 [r dbsize]
        # Any flipped byte: the body, the version, the CRC itself.
        foreach i [list 0 5 100 4999 [expr {[string length $p] - 10}] [expr {[string length $p] - 1}]] {
            assert_error {ERR DUMP payload version or checksum are wrong} {r restore bad:1 0 [flip_byte $p $i]}
            assert_error {ERR DUMP payload version or checksum are wrong} {r restore bad:keep 0 [flip_byte $p $i] REPLACE}
        }
        # Truncated anywhere, and empty.
        foreach cut {1 9 10 11 2500} {
            assert_error {ERR DUMP payload version or checksum are wrong} {r restore bad:1 0 [string range $p 0 end-$cut]}
        }
        assert_error {ERR DUMP payload version or checksum are wrong} {r restore bad:1 0 ""}
        # Another version (a Redis RDB payload has 9..12), CRC recomputed.
        assert_error {ERR DUMP payload version or checksum are wrong} {r restore bad:1 0 [payload_seal [string_body abc] 11]}
        assert_equal $n0 [r dbsize]
        assert_equal untouched [r get bad:keep]
        assert_equal 0 [r exists bad:1]
    }

    test {Payloads with a valid CRC but a bad body are "Bad data format"} {
        r set bad:keep untouched
        set cases [list \
            [string_body abc 1000] \
            [string_body abc 2] \
            [string_body abc 18446744073709551615] \
            [string_body abc 9223372036854775808] \
            [binary format c 0] \
            "" \
            [string range [string_body abc] 0 5] \
            "[binary format c 7][binary format w 3]abc" \
            [object_body abc 4 0 0] \
            [string range [object_body abc 0 0 0] 0 10] \
            [object_body abc 0 -5 0] \
            [object_body abc 0 0 -1] \
        ]
        # A checksum length running past the body.
        set b [object_body abc 2 0 0 crc]
        lappend cases [string replace $b 18 21 [binary format i 1000]]
        lappend cases [string replace $b 18 21 [binary format i -1]]
        foreach body $cases {
            assert_error {ERR Bad data format} {r restore bad:1 0 [payload_seal $body]}
            assert_error {ERR Bad data format} {r restore bad:keep 0 [payload_seal $body] REPLACE}
        }
        assert_equal 0 [r exists bad:1]
        assert_equal untouched [r get bad:keep]
        # The well-formed ones of the same shapes are accepted.
        assert_equal OK [r restore ok:1 0 [payload_seal [string_body abc]]]
        assert_equal OK [r restore ok:2 0 [payload_seal [object_body abc 2 0 0 crc]]]
        list [r get ok:1] [r get ok:2] [dict get [r object.info ok:2] checksum]
    } {abc abc crc}

    test {RESTORE that finds no room is -OOM and changes nothing} {
        r config set evict-policy noeviction
        r set oom:keep old
        # A 3 MiB payload, then a pool too full to take it.
        r set oom:src [pattern_bytes [expr {3 * 1048576}] 1]
        set p [r dump oom:src]
        r del oom:src
        for {set i 0} {![catch {r set oom:fill:$i [pattern_bytes [expr {3 * 1048576}] 2]}]} {incr i} {}
        set oom0 [s oom_rejections]
        assert_error {OOM *} {r restore oom:1 0 $p}
        assert_error {OOM *} {r restore oom:keep 0 $p REPLACE}
        assert_equal [expr {$oom0 + 2}] [s oom_rejections]
        assert_equal 0 [r exists oom:1]
        assert_equal old [r get oom:keep]
        for {set j 0} {$j < $i} {incr j} { r del oom:fill:$j }
        r config set evict-policy lru
    }

    test {RESTORE respects max-key-size and max-object-size} {
        set p [payload_seal [string_body [string repeat x 100]]]
        r config set max-object-size 99
        assert_error {ERR value is too large*} {r restore mx:1 0 $p}
        r config set max-object-size 1gb
        r config set max-key-size 10
        assert_error {ERR key is too long*} {r restore [string repeat k 11] 0 $p}
        r config set max-key-size 4096
        assert_equal 0 [r exists mx:1]
    }

    test {DUMP of a pending store object is nil, as GET} {
        r put.start pend:1 10
        assert_equal {} [r dump pend:1]
        r put.revoke pend:1
    }

    test {A store object keeps checksum, hard pin and soft pin through DUMP / RESTORE} {
        set val [pattern_bytes 3000 4]
        set rep [lindex [r put.start so:1 3000 HARDPIN PIN 600000] 0]
        r seg.write [lindex $rep 0] [lindex $rep 1] $val
        assert_equal OK [r put.end so:1 CHECKSUM crc32c:00c0ffee]
        set created [dict get [r object.info so:1] created]
        set p [r dump so:1]
        assert_equal OK [r restore so:2 0 $p]
        set info [r object.info so:2]
        assert_equal complete [dict get $info state]
        assert_equal hard [dict get $info pin]
        assert_range [dict get $info pin-ms] 590000 600000
        assert_equal crc32c:00c0ffee [dict get $info checksum]
        assert_equal $created [dict get $info created]
        # Readable through GET.REPLICAS + SEG.READ and through GET.
        set gr [r get.replicas so:2]
        assert_equal 3000 [lindex $gr 1]
        assert_equal crc32c:00c0ffee [lindex $gr 2]
        lassign [lindex $gr 3] seg off len
        assert_equal $val [r seg.read $seg $off $len]
        assert_equal $val [r get so:2]
        # A soft pin alone, no checksum.
        r put.start so:3 5 PIN 60000
        r put.end so:3
        assert_equal OK [r restore so:4 0 [r dump so:3]]
        assert_equal soft [dict get [r object.info so:4] pin]
        assert_equal {} [dict get [r object.info so:4] checksum]
        # The payload is the documented OBJECT layout.
        r unpin so:3
        set p3 [r dump so:3]
        assert_equal [payload_seal [object_body [r get so:3] 0 [dict get [r object.info so:3] created] 0]] $p3
    }

    test {RESTORE REPLACE over a leased object defers its space} {
        r config set lease-ttl 1500
        set val [pattern_bytes 2000 6]
        set rep [lindex [r put.start ls:1 2000] 0]
        lassign $rep seg off len
        r seg.write $seg $off $val
        r put.end ls:1
        r get.replicas ls:1
        set d0 [istore store_deferred_frees]
        r set ls:src newer
        assert_equal OK [r restore ls:1 0 [r dump ls:src] REPLACE]
        assert_equal newer [r get ls:1]
        # The lease holder still reads the old bytes where it was told.
        assert_equal $val [r seg.read $seg $off $len]
        assert_equal [expr {$d0 + 1}] [istore store_deferred_frees]
        wait_for_condition 100 50 {[istore store_deferred_frees] == $d0} else {
            fail "the old version's space was not freed after its lease"
        }
        assert_error {*not inside*} {r seg.read $seg $off $len}
        r config set lease-ttl 10000
    }

    test {DUMP and RESTORE are in COMMAND with their key positions} {
        assert_equal {dump 2} [lrange [lindex [r command info dump] 0] 0 1]
        assert_equal {restore -4} [lrange [lindex [r command info restore] 0] 0 1]
        assert_equal {restore-asking -4} [lrange [lindex [r command info restore-asking] 0] 0 1]
        assert_equal {k} [r command getkeys restore k 0 payload]
    }
}

# ---------------------------------------------------------------------------
# MIGRATE between two servers: `r -1` is the source, `r` the target.
# ---------------------------------------------------------------------------

start_server {tags {mooncake migrate} overrides {segment-size 128mb}} {
start_server {overrides {segment-size 128mb}} {
    set thost [srv 0 host]
    set tport [srv 0 port]

    test {MIGRATE moves one key, its TTL with it} {
        r -1 set m:1 value1
        r -1 pexpire m:1 50000
        assert_equal OK [r -1 migrate $thost $tport m:1 0 5000]
        assert_equal 0 [r -1 exists m:1]
        assert_equal value1 [r get m:1]
        assert_range [r pttl m:1] 40000 50000
        r -1 set m:2 value2
        assert_equal OK [r -1 migrate $thost $tport m:2 0 5000]
        assert_equal -1 [r pttl m:2]
    }

    test {MIGRATE KEYS moves several keys; missing ones are skipped} {
        r -1 mset k:a 1 k:b 2 k:c ""
        assert_equal OK [r -1 migrate $thost $tport "" 0 5000 KEYS k:a k:nothing k:b k:c]
        assert_equal 0 [r -1 exists k:a k:b k:c]
        list [r get k:a] [r get k:b] [r exists k:c] [r strlen k:c]
    } {1 2 1 0}

    test {MIGRATE of missing keys is NOKEY} {
        assert_equal NOKEY [r -1 migrate $thost $tport m:none 0 5000]
        assert_equal NOKEY [r -1 migrate $thost $tport "" 0 5000 KEYS x:1 x:2]
    }

    test {MIGRATE COPY keeps the source key} {
        r -1 set cp:1 copied
        assert_equal OK [r -1 migrate $thost $tport cp:1 0 5000 COPY]
        list [r -1 get cp:1] [r get cp:1]
    } {copied copied}

    test {MIGRATE onto an existing key: the target's error, then REPLACE} {
        r -1 set rp:1 fromsource
        r set rp:1 ontarget
        assert_error {ERR Target instance replied with error: BUSYKEY Target key name already exists.} {
            r -1 migrate $thost $tport rp:1 0 5000
        }
        assert_equal fromsource [r -1 get rp:1]
        assert_equal ontarget [r get rp:1]
        assert_equal OK [r -1 migrate $thost $tport rp:1 0 5000 REPLACE]
        assert_equal 0 [r -1 exists rp:1]
        assert_equal fromsource [r get rp:1]
    }

    test {MIGRATE KEYS with one refused key: the others move, the error is reported} {
        r -1 mset pr:1 a pr:2 b pr:3 c
        r set pr:2 taken
        assert_error {ERR Target instance replied with error: BUSYKEY*} {
            r -1 migrate $thost $tport "" 0 5000 KEYS pr:1 pr:2 pr:3
        }
        list [r -1 exists pr:1] [r -1 get pr:2] [r -1 exists pr:3] [r get pr:1] [r get pr:2] [r get pr:3]
    } {0 b 0 a taken c}

    test {MIGRATE argument errors} {
        r -1 set ae:1 v
        assert_error {ERR destination-db*} {r -1 migrate $thost $tport ae:1 1 5000}
        assert_error {ERR When using MIGRATE KEYS option*} {r -1 migrate $thost $tport ae:1 0 5000 KEYS ae:1}
        assert_error {ERR syntax error*} {r -1 migrate $thost $tport ae:1 0 5000 BOGUS}
        assert_error {ERR syntax error*} {r -1 migrate $thost $tport ae:1 0 5000 AUTH}
        assert_error {ERR value is not an integer*} {r -1 migrate $thost $tport ae:1 0 soon}
        assert_error {ERR Invalid port*} {r -1 migrate $thost 0 ae:1 0 5000}
        assert_error {*wrong number of arguments*} {r -1 migrate $thost $tport ae:1 0}
        assert_equal v [r -1 get ae:1]
    }

    test {MIGRATE to a port nobody listens on is IOERR at once} {
        r -1 set io:1 v
        set port [find_available_port]
        # Refused at once, not after the timeout (the bound is loose: a
        # loaded test machine is slow, but not 30 s slow).
        set t0 [clock milliseconds]
        assert_error {IOERR error or timeout connecting to the client} {r -1 migrate 127.0.0.1 $port io:1 0 30000}
        assert_lessthan [expr {[clock milliseconds] - $t0}] 15000
        assert_equal v [r -1 get io:1]
    }

    test {MIGRATE to a target that never answers times out: IOERR, key kept} {
        # A listener whose connections this process never serves: the
        # kernel accepts them, nobody reads.
        set l [socket -server {apply {{ch a p} {}}} -myaddr 127.0.0.1 0]
        set port [lindex [fconfigure $l -sockname] 2]
        r -1 set io:2 v
        set t0 [clock milliseconds]
        assert_error {IOERR error or timeout reading to target instance} {r -1 migrate 127.0.0.1 $port io:2 0 300}
        set el [expr {[clock milliseconds] - $t0}]
        assert_range $el 250 15000
        assert_equal v [r -1 get io:2]
        close $l
    }

    test {A target answering nonsense is IOERR and its connection is dropped} {
        # An over-long line, then a bulk reply: neither answers RESTORE.
        foreach answer [list "+[string repeat x 5000]\r\n" "\$3\r\nabc\r\n"] {
            set port [faketarget_start $answer]
            r -1 set io:3 v
            set d [redis_deferring_client -1]
            $d migrate 127.0.0.1 $port io:3 0 2000
            wait_var ::faketarget(served) 1
            assert_error {IOERR error or timeout reading to target instance} {$d read}
            $d close
            assert_equal v [r -1 get io:3]
            faketarget_stop
        }
    }

    test {MIGRATE reuses its connection to a target} {
        r -1 set re:1 a
        r -1 set re:2 b
        r -1 migrate $thost $tport re:1 0 5000
        set before [llength [split [string trim [r client list]] "\n"]]
        r -1 migrate $thost $tport re:2 0 5000
        assert_equal $before [llength [split [string trim [r client list]] "\n"]]
        # And survives the target closing it: a stale connection is retried.
        r client kill type normal skipme yes
        reconnect
        r -1 set re:3 c
        assert_equal OK [r -1 migrate $thost $tport re:3 0 5000]
        r get re:3
    } {c}

    test {A large value goes across byte for byte} {
        set big [pattern_bytes [expr {20 * 1048576 + 7}] 9]
        r -1 set big:1 $big
        r -1 pexpire big:1 100000
        assert_equal OK [r -1 migrate $thost $tport big:1 0 10000]
        assert_equal 0 [r -1 exists big:1]
        assert {[r get big:1] eq $big}
        assert_range [r pttl big:1] 90000 100000
        # Many values of mixed sizes in one MIGRATE.
        set keys {}
        for {set i 0} {$i < 40} {incr i} {
            set v [pattern_bytes [expr {($i % 4) == 0 ? 100000 + $i : 10 + $i}] $i]
            r -1 set mix:$i $v
            set expect(mix:$i) $v
            lappend keys mix:$i
        }
        assert_equal OK [r -1 migrate $thost $tport "" 0 10000 KEYS {*}$keys]
        foreach k $keys {
            assert {[r get $k] eq $expect($k)}
        }
        r -1 exists {*}$keys
    } {0}

    test {A store object migrates byte-exact with its checksum and hard pin} {
        set size 300000
        set val [pattern_bytes $size 13]
        set rep [lindex [r -1 put.start obj:1 $size HARDPIN] 0]
        lassign $rep seg off len
        r -1 seg.write $seg $off $val
        assert_equal OK [r -1 put.end obj:1 CHECKSUM sha256:feed]
        assert_equal OK [r -1 migrate $thost $tport obj:1 0 5000]
        assert_equal 0 [r -1 exists obj:1]
        set info [r object.info obj:1]
        assert_equal hard [dict get $info pin]
        assert_equal sha256:feed [dict get $info checksum]
        set gr [r get.replicas obj:1]
        assert_equal sha256:feed [lindex $gr 2]
        lassign [lindex $gr 3] tseg toff tlen
        assert_equal $size $tlen
        assert {[r seg.read $tseg $toff $tlen] eq $val}
    }

    test {A leased object migrates; the lease holder still reads the source until the lease ends} {
        r -1 config set lease-ttl 1500
        set val [pattern_bytes 50000 17]
        set rep [lindex [r -1 put.start ls:1 50000] 0]
        lassign $rep seg off len
        r -1 seg.write $seg $off $val
        r -1 put.end ls:1
        set gr [r -1 get.replicas ls:1]
        assert_equal [list $seg $off $len] [lindex $gr 3]
        set d0 [get_info_field [redis_client -1] store store_deferred_frees]
        assert_equal OK [r -1 migrate $thost $tport ls:1 0 5000]
        assert_equal 0 [r -1 exists ls:1]
        assert {[r get ls:1] eq $val}
        # The source's extent is still the lease holder's.
        assert {[r -1 seg.read $seg $off $len] eq $val}
        assert_equal 1 [expr {[get_info_field [redis_client -1] store store_deferred_frees] - $d0}]
        wait_for_condition 100 50 {[catch {r -1 seg.read $seg $off $len}]} else {
            fail "the migrated object's space outlived its lease"
        }
        r -1 config set lease-ttl 10000
    }

    test {MIGRATE is in COMMAND with movable keys} {
        set info [lindex [r command info migrate] 0]
        assert_equal -6 [lindex $info 1]
        assert {"movablekeys" in [lindex $info 2]}
    }
}
}

# ---------------------------------------------------------------------------
# Relayed reads carry a segment's token, never the server's password, and go
# only where owner.c's rule lets the server connect (issue 25, finding 1).
# ---------------------------------------------------------------------------

start_server {tags {mooncake migrate} overrides {segment-size 16mb requirepass adminpw}} {
    r auth adminpw
    r acl setuser alice on >pa ~alice:* +@all
    r acl setuser bob on >pb ~bob:* +@all
    set alice [redis_client]
    $alice auth alice pa
    set bob [redis_client]
    $bob auth bob pb
    set hport [fakehost_start]
    $alice mount alice-seg 1mb ENDPOINT tcp://127.0.0.1:$hport OWNER alice-host

    test {A tenant's listener gets the segment's token, never the admin password} {
        set rep [lindex [$alice put.start alice:k 5000 PREFER alice-seg] 0]
        lassign $rep seg off len
        $alice put.end alice:k
        set d [redis_deferring_client]
        $d auth adminpw
        $d read
        set served $::fakehost(served)
        $d get alice:k
        wait_var ::fakehost(served) [expr {$served + 1}]
        set got [$d read]
        $d close
        assert_equal [string range $::fakehost(mem) $off [expr {$off + 4999}]] $got
        foreach argv $::fakehost(argvs) {
            if {[lsearch -exact $argv adminpw] >= 0} { fail "the listener received the admin password: $argv" }
            assert_not_equal AUTH [string toupper [lindex $argv 0]]
        }
        # What it got instead: SEG.AUTH with the segment's id and token.
        set auth [lsearch -inline -index 0 $::fakehost(argvs) SEG.AUTH]
        assert_equal [list SEG.AUTH [dict get [r segment.info alice-seg] id] [$alice segment.token alice-seg]] $auth
    }

    test {SEGMENT.TOKEN: the segment's users get it, other tenants nil; a remount rotates it} {
        set t [$alice segment.token alice-seg]
        assert_match {[0-9a-f]*} $t
        assert {[string length $t] >= 32}
        assert_equal $t [r segment.token alice-seg]
        assert_equal {} [$bob segment.token alice-seg]
        assert_equal {} [r segment.token self]
        assert_equal {} [r segment.token no-such-seg]
        $alice mount alice-seg 1mb ENDPOINT tcp://127.0.0.1:$hport OWNER alice-host
        set t2 [$alice segment.token alice-seg]
        assert_not_equal $t $t2
        set mine [string repeat ab 16]
        $alice mount alice-seg 1mb ENDPOINT tcp://127.0.0.1:$hport TOKEN $mine OWNER alice-host
        assert_equal $mine [$alice segment.token alice-seg]
        assert_error {ERR invalid TOKEN*} {$alice mount alice-seg 1mb TOKEN short OWNER alice-host}
        assert_error {ERR invalid TOKEN*} {$alice mount alice-seg 1mb TOKEN [string repeat z 32] OWNER alice-host}
    }

    test {The server connects to no endpoint but the mounting peer's own: refused with the reason} {
        set own [srv 0 port]
        foreach {name ep why} [list far tcp://192.0.2.1:$hport "not the address the segment was mounted from" \
                                    path unix:///tmp/mc-no-such.sock "unix socket path" \
                                    self tcp://127.0.0.1:$own "the server's own port" \
                                    named tcp://localhost.localdomain:$hport "not a numeric"] {
            $alice mount alice-$name 1mb ENDPOINT $ep OWNER alice-host
            $alice put.start alice:$name 100 PREFER alice-$name
            $alice put.end alice:$name
            set served $::fakehost(served)
            set t0 [clock milliseconds]
            catch {r get alice:$name} e
            assert_match "REMOTE*$ep: not connected to*$why*" $e
            assert_equal $served $::fakehost(served)
        }
    }

    $alice close
    $bob close
    fakehost_stop
}

# ---------------------------------------------------------------------------
# MIGRATE with AUTH to a target with requirepass.
# ---------------------------------------------------------------------------

start_server {tags {mooncake migrate} overrides {segment-size 16mb}} {
start_server {overrides {segment-size 16mb requirepass s3cret}} {
    set thost [srv 0 host]
    set tport [srv 0 port]
    r auth s3cret

    test {MIGRATE without AUTH gets the target's NOAUTH and keeps the key} {
        r -1 set au:1 v
        assert_error {ERR Target instance replied with error: NOAUTH*} {r -1 migrate $thost $tport au:1 0 5000}
        assert_equal v [r -1 get au:1]
    }

    test {MIGRATE with a wrong password: WRONGPASS, nothing moves} {
        r -1 mset au:2 a au:3 b
        assert_error {ERR Target instance replied with error: WRONGPASS*} {
            r -1 migrate $thost $tport "" 0 5000 AUTH nope KEYS au:2 au:3
        }
        list [r -1 exists au:2 au:3] [r exists au:2 au:3]
    } {2 0}

    test {MIGRATE AUTH and AUTH2 reach a target with requirepass} {
        assert_equal OK [r -1 migrate $thost $tport au:1 0 5000 AUTH s3cret]
        assert_equal OK [r -1 migrate $thost $tport "" 0 5000 AUTH2 default s3cret KEYS au:2 au:3]
        list [r -1 dbsize] [r get au:1] [r get au:2] [r get au:3]
    } {0 v a b}
}
}

# ---------------------------------------------------------------------------
# Values held only in a mounted segment: fetched from its host by SEG.READ.
# ---------------------------------------------------------------------------

start_server {tags {mooncake migrate} overrides {segment-size 16mb}} {
start_server {overrides {segment-size 16mb}} {
    set thost [srv 0 host]
    set tport [srv 0 port]
    set hport [fakehost_start]
    set owner [redis_client -1]
    set fid [$owner mount fake 1mb ENDPOINT tcp://127.0.0.1:$hport OWNER fakehost]

    test {DUMP of a value in a mounted segment reads it from the segment's host} {
        set rep [lindex [r -1 put.start rm:1 5000 PREFER fake] 0]
        lassign $rep seg off len
        assert_equal $fid $seg
        r -1 put.end rm:1 CHECKSUM xx:1
        assert_error {REMOTE*} {r -1 get rm:1}
        set d [redis_deferring_client -1]
        set served $::fakehost(served)
        $d dump rm:1
        wait_var ::fakehost(served) [expr {$served + 1}]
        set p [$d read]
        $d close
        assert_equal SEG.READ [lindex $::fakehost(requests) end]
        # Restored here, the bytes are the host's at the extent's offset.
        assert_equal OK [r -1 restore rm:copy 0 $p]
        assert_equal [string range $::fakehost(mem) $off [expr {$off + 4999}]] [r -1 get rm:copy]
        assert_equal xx:1 [dict get [r -1 object.info rm:copy] checksum]
    }

    test {MIGRATE of a value in a mounted segment} {
        set rep [lindex [r -1 put.start rm:2 70000 PREFER fake] 0]
        lassign $rep seg off len
        r -1 put.end rm:2
        set d [redis_deferring_client -1]
        set served $::fakehost(served)
        $d migrate $thost $tport rm:2 0 5000
        wait_var ::fakehost(served) [expr {$served + 1}]
        assert_equal OK [$d read]
        $d close
        assert_equal 0 [r -1 exists rm:2]
        assert {[r get rm:2] eq [string range $::fakehost(mem) $off [expr {$off + 69999}]]}
    }

    test {GET, GETRANGE and MGET of a value in a mounted segment relay its bytes (issue 12)} {
        set rep [lindex [r -1 put.start rg:1 70000 PREFER fake] 0]
        lassign $rep seg off len
        r -1 put.end rg:1
        set want [string range $::fakehost(mem) $off [expr {$off + 69999}]]
        set before [istore_stat remote_get_bytes]
        foreach {cmd wanted} [list [list get rg:1] $want \
                                   [list getrange rg:1 100 199] [string range $want 100 199] \
                                   [list mget rg:1 rg:none] [list $want {}]] {
            set d [redis_deferring_client -1]
            set served $::fakehost(served)
            $d {*}$cmd
            wait_var ::fakehost(served) [expr {$served + 1}]
            set got [$d read]
            $d close
            if {$got ne $wanted} { fail "$cmd: [string length $got] bytes, not the host's" }
        }
        assert_equal [expr {$before + 70000 + 100 + 70000}] [istore_stat remote_get_bytes]
        # The relay holds a read lease, as GET.REPLICAS does.
        assert {[dict get [r -1 object.info rg:1] lease-ms] > 0}
        # Past remote-get-max-size the client is sent to GET.REPLICAS, the host untouched.
        r -1 config set remote-get-max-size 1000
        set served $::fakehost(served)
        assert_error {REMOTE*remote-get-max-size*GET.REPLICAS*} {r -1 get rg:1}
        assert_equal $served $::fakehost(served)
        assert_equal OK [r -1 config set remote-get-max-size 64mb]
    }

    test {A host that refuses the read: -REMOTE with its reason, nothing moves} {
        r -1 put.start rm:3 100 PREFER fake
        r -1 put.end rm:3
        set ::fakehost(mode) error
        foreach cmd [list [list dump rm:3] [list migrate $thost $tport rm:3 0 5000]] {
            set d [redis_deferring_client -1]
            set served $::fakehost(served)
            $d {*}$cmd
            wait_var ::fakehost(served) [expr {$served + 1}]
            assert_error {REMOTE *range is outside the segment*} {$d read}
            $d close
        }
        set ::fakehost(mode) ok
        list [r -1 exists rm:3] [r exists rm:3]
    } {1 0}

    test {A segment whose host is gone: -REMOTE at once} {
        set dead [find_available_port]
        $owner mount gone 1mb ENDPOINT tcp://127.0.0.1:$dead OWNER fakehost
        r -1 put.start rm:4 100 PREFER gone
        r -1 put.end rm:4
        set t0 [clock milliseconds]
        assert_error {REMOTE*127.0.0.1:*} {r -1 dump rm:4}
        assert_error {REMOTE*} {r -1 migrate $thost $tport rm:4 0 30000}
        assert_lessthan [expr {[clock milliseconds] - $t0}] 15000
        assert_equal 1 [r -1 exists rm:4]
        # A mount without endpoints has nothing to read from.
        $owner mount noep 1mb OWNER fakehost
        r -1 put.start rm:5 100 PREFER noep
        r -1 put.end rm:5
        assert_error {REMOTE*no replica has a tcp:// or unix:// endpoint*} {r -1 dump rm:5}
    }

    $owner close
    fakehost_stop
}
}
