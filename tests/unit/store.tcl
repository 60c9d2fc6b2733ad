# Store commands (SPEC §3 "Objects", "Replica", "Read lease", "Pins",
# "Eviction", "Abandoned writes", "Owners"; §4.2 PUT.START, PUT.END,
# PUT.REVOKE, GET.REPLICAS, LEASE, PIN, UNPIN, REMOVE, REMOVE.ALL,
# OBJECT.INFO and the BATCH forms): two-phase puts and their ownership,
# take-over of abandoned puts, leases that keep space from being reused,
# pins and eviction order, replica placement (distinct segments and hosts,
# PREFER, free-ratio spread), NOSPACE, argument validation with no state
# change, owner death and UNMOUNT dropping replicas, plain GET of store
# objects and the commands' COMMAND entries.
#
# Reply shapes (RESP2): PUT.START -> {{seg-id offset length} ...};
# GET.REPLICAS -> {lease-ms size checksum-or-"" replica...} or "" (nil);
# OBJECT.INFO -> a flat field/value list. In a batch reply an error element
# comes back from the test client as its text ("NOKEY no such key").

set KiB 1024
set MiB 1048576

set ::object_info_fields {state size replicas lease-ms holds pin pin-ms created last-access-ms checksum pending refcount}

# PUT.START + PUT.END on one connection; returns the PUT.START reply.
proc put {key size args} {
    set reps [r put.start $key $size {*}$args]
    assert_equal OK [r put.end $key]
    return $reps
}

proc istore {field {client r}} {
    get_info_field $client store $field
}

# OBJECT.INFO without the fields that move with the clock, for before/after
# comparisons.
proc oinfo_stable {key {client r}} {
    set i [$client object.info $key]
    if {$i eq ""} { return {} }
    dict unset i last-access-ms
    dict unset i lease-ms
    dict unset i pin-ms
    return $i
}

proc ofield {key field {client r}} {
    set i [$client object.info $key]
    if {$i eq ""} { return {} }
    dict get $i $field
}

# The segment ids of a replica list.
proc rep_segs {reps} {
    set ids {}
    foreach rep $reps { lappend ids [lindex $rep 0] }
    return $ids
}

# The replicas of a GET.REPLICAS reply.
proc gr_replicas {reply} {
    lrange $reply 3 end
}

# ---------------------------------------------------------------------------
# Two-phase puts, reads, leases, ownership.
# ---------------------------------------------------------------------------

start_server {tags {mooncake store} overrides {segment-size 1mb evict-policy noeviction}} {

    test {No stale bytes: a put ended unwritten reads as zeros, even in space an earlier value used (issue 12)} {
        # Fill the pool's first extents with a pattern, free them, then
        # publish objects of the same sizes without writing a byte.
        set pattern [string repeat "secret!!" 8192]
        foreach k {st:a st:b st:c} { r set $k $pattern }
        r del st:a st:b st:c
        foreach {k size} {st:x 65536 st:y 4096 st:z 100} {
            r put.start $k $size
            assert_equal OK [r put.end $k]
            set v [r get $k]
            assert_equal $size [string length $v]
            if {$v ne [string repeat "\x00" $size]} {
                fail "$k: [regexp -all -inline {secret} [string range $v 0 64]] stale bytes published"
            }
        }
        # Half written: the other half is zeros, not the old value.
        set rep [lindex [r put.start st:half 1000] 0]
        lassign $rep seg off len
        r seg.write $seg $off [string repeat A 500]
        r put.end st:half
        assert_equal "[string repeat A 500][string repeat "\x00" 500]" [r get st:half]
        r del st:x st:y st:z st:half
    }

    test {PUT.START / PUT.END / GET.REPLICAS round trip} {
        set started0 [istore store_puts_started]
        set ended0 [istore store_puts_ended]
        set reps [r put.start rt:1 1000]
        assert_equal 1 [llength $reps]
        set rep [lindex $reps 0]
        assert_equal 3 [llength $rep]
        assert_equal 1 [lindex $rep 0]
        assert {[string is wideinteger -strict [lindex $rep 1]]}
        assert_range [lindex $rep 1] 0 [expr {$::MiB - 1000}]
        assert_equal 1000 [lindex $rep 2]
        assert_equal [expr {$started0 + 1}] [istore store_puts_started]
        assert_equal 1 [istore store_puts_pending]
        # Pending: invisible to the keyspace.
        assert_equal 0 [r exists rt:1]
        assert_equal 0 [r dbsize]
        assert_equal OK [r put.end rt:1]
        assert_equal [expr {$ended0 + 1}] [istore store_puts_ended]
        assert_equal 0 [istore store_puts_pending]
        assert_equal 1 [r exists rt:1]
        assert_equal 1 [r dbsize]
        set g [r get.replicas rt:1]
        assert_equal 4 [llength $g]
        assert_range [lindex $g 0] 9000 10000
        assert_equal 1000 [lindex $g 1]
        assert_equal {} [lindex $g 2]
        assert_equal $reps [gr_replicas $g]
        # The extent is accounted in the pool (rounded up to the allocator's unit).
        assert_range [istore store_pool_used] 1000 4096
    }

    test {OBJECT.INFO of a complete object: every field} {
        set t0 [clock milliseconds]
        set reps [put oi:1 4096]
        set i [r object.info oi:1]
        assert_equal $::object_info_fields [dict keys $i]
        assert_equal complete [dict get $i state]
        assert_equal 4096 [dict get $i size]
        assert_equal $reps [dict get $i replicas]
        assert_equal 0 [dict get $i lease-ms]
        assert_equal none [dict get $i pin]
        assert_equal 0 [dict get $i pin-ms]
        assert_range [dict get $i created] [expr {$t0 - 2000}] [expr {$t0 + 2000}]
        assert_range [dict get $i last-access-ms] 0 2000
        assert_equal {} [dict get $i checksum]
        assert_equal 0 [dict get $i pending]
        assert_equal 1 [dict get $i refcount]
        # Pending object: state pending, pending 1.
        r put.start oi:2 10
        assert_equal pending [ofield oi:2 state]
        assert_equal 1 [ofield oi:2 pending]
        assert_equal 10 [ofield oi:2 size]
        r put.revoke oi:2
        assert_equal {} [r object.info oi:2]
        assert_equal {} [r object.info no-such-object]
    }

    test {OBJECT.INFO under RESP3 is a map} {
        set c [redis_client]
        $c hello 3
        set m [$c object.info oi:1]
        assert_equal {%12} [$c lastheader]
        assert_equal [oinfo_stable oi:1] [oinfo_stable oi:1 $c]
        $c close
    }

    test {GET.REPLICAS before PUT.END is NOTREADY; of a missing key nil} {
        set nr0 [istore store_get_replicas_notready]
        set miss0 [istore store_get_replicas_misses]
        r put.start nr:1 100
        assert_error {NOTREADY*} {r get.replicas nr:1}
        # Also from another connection.
        set c [redis_client]
        assert_error {NOTREADY*} {$c get.replicas nr:1}
        $c close
        assert_equal [expr {$nr0 + 2}] [istore store_get_replicas_notready]
        assert_equal {} [r get.replicas no-such-key]
        assert_match {[*_]-1} [r lastheader]
        assert_equal [expr {$miss0 + 1}] [istore store_get_replicas_misses]
        assert_equal OK [r put.end nr:1]
        assert_equal 100 [lindex [r get.replicas nr:1] 1]
    }

    test {GET.REPLICAS grants a lease of lease-ttl; CONFIG SET lease-ttl} {
        put ls:1 100
        assert_equal 0 [ofield ls:1 lease-ms]
        set granted0 [istore store_leases_granted]
        set l [lindex [r get.replicas ls:1] 0]
        assert_range $l 9000 10000
        assert_range [ofield ls:1 lease-ms] 8000 10000
        assert_equal [expr {$granted0 + 1}] [istore store_leases_granted]
        assert_equal OK [r config set lease-ttl 2000]
        assert_equal {lease-ttl 2000} [r config get lease-ttl]
        put ls:2 100
        set l2 [lindex [r get.replicas ls:2] 0]
        assert_range $l2 1500 2000
        # A shorter lease-ttl never shortens a running lease.
        set l1 [lindex [r get.replicas ls:1] 0]
        assert_range $l1 8000 10000
        r config set lease-ttl 10000
    }

    test {LEASE extends the lease, never shortens it; nil for a missing key} {
        put le:1 100
        r config set lease-ttl 1000
        assert_range [lindex [r get.replicas le:1] 0] 500 1000
        set l [r lease le:1 5000]
        assert_range $l 4500 5000
        assert_range [ofield le:1 lease-ms] 4000 5000
        # A shorter LEASE leaves the longer one in place.
        assert_range [r lease le:1 100] 4000 5000
        assert_range [r lease le:1 0] 4000 5000
        assert_equal {} [r lease no-such-key 1000]
        assert_match {[$_]-1} [r lastheader]
        # A pending object has no lease to extend.
        r put.start le:p 10
        assert_equal {} [r lease le:p 1000]
        r put.revoke le:p
        r config set lease-ttl 10000
    }

    test {LEASE refuses negative, too long and non-numeric times} {
        put le:2 100
        assert_equal 0 [ofield le:2 lease-ms]
        assert_error {ERR*} {r lease le:2 -1}
        assert_error {ERR*} {r lease le:2 86400001}
        assert_error {ERR*} {r lease le:2 abc}
        assert_error {ERR*} {r lease le:2 99999999999999999999}
        assert_error {ERR*wrong number*} {r lease le:2}
        assert_equal 0 [ofield le:2 lease-ms]
        # The bound itself is accepted.
        assert_range [r lease le:2 86400000] 86399000 86400000
    }

    test {Duplicate PUT.START of a complete key is EXISTS; also of a SET key} {
        set reps [put dup:1 100]
        set before [oinfo_stable dup:1]
        set started0 [istore store_puts_started]
        assert_error {EXISTS*} {r put.start dup:1 100}
        assert_error {EXISTS*} {r put.start dup:1 200}
        assert_equal $before [oinfo_stable dup:1]
        assert_equal $started0 [istore store_puts_started]
        r set dup:s hello
        assert_error {EXISTS*} {r put.start dup:s 5}
        assert_equal hello [r get dup:s]
    }

    test {PUT.START REPLACE: old version readable until PUT.END swaps} {
        set old [put rep:1 1000]
        set c [redis_client]
        set new [$c put.start rep:1 2000 REPLACE]
        assert_equal 1 [llength $new]
        assert_equal 2000 [lindex $new 0 2]
        assert_not_equal [lindex $old 0 1] [lindex $new 0 1]
        # Readers still get the old version, at the old offset.
        set g [r get.replicas rep:1]
        assert_equal 1000 [lindex $g 1]
        assert_equal $old [gr_replicas $g]
        assert_equal complete [ofield rep:1 state]
        assert_equal 1 [ofield rep:1 pending]
        assert_equal 1000 [ofield rep:1 size]
        assert_equal 1 [r exists rep:1]
        # A second PUT.START of the pending key: EXISTS, with or without REPLACE,
        # from this or another connection.
        assert_error {EXISTS*} {r put.start rep:1 3000 REPLACE}
        assert_error {EXISTS*} {$c put.start rep:1 3000 REPLACE}
        assert_error {EXISTS*} {r put.start rep:1 3000}
        assert_equal OK [$c put.end rep:1]
        set g [r get.replicas rep:1]
        assert_equal 2000 [lindex $g 1]
        assert_equal $new [gr_replicas $g]
        assert_equal 0 [ofield rep:1 pending]
        assert_equal 2000 [ofield rep:1 size]
        assert_equal 2000 [r strlen rep:1]
        $c close
    }

    test {PUT.END and PUT.REVOKE from another connection are NOTOWNER} {
        set c [redis_client]
        set reps [$c put.start own:1 100]
        assert_error {NOTOWNER*} {r put.end own:1}
        assert_error {NOTOWNER*} {r put.end own:1 CHECKSUM x}
        assert_error {NOTOWNER*} {r put.revoke own:1}
        # Nothing changed: still pending, and the owner can end it.
        assert_equal pending [ofield own:1 state]
        assert_error {NOTREADY*} {r get.replicas own:1}
        assert_equal OK [$c put.end own:1]
        assert_equal $reps [gr_replicas [r get.replicas own:1]]
        # Repeating a successful PUT.END on the same connection is OK ...
        assert_equal OK [$c put.end own:1]
        assert_equal OK [$c put.end own:1]
        # ... but not from another one.
        assert_error {NOTPENDING*} {r put.end own:1}
        $c close
    }

    test {PUT.END errors: NOTPENDING for a SET key, NOKEY for a missing one, syntax} {
        r set plain:1 v
        assert_error {NOTPENDING*} {r put.end plain:1}
        assert_error {NOTPENDING*} {r put.revoke plain:1}
        assert_error {NOKEY*} {r put.end no-such-key}
        assert_error {NOKEY*} {r put.revoke no-such-key}
        r put.start syn:1 10
        assert_error {ERR*} {r put.end syn:1 CHECKSUM}
        assert_error {ERR*} {r put.end syn:1 FOO bar}
        assert_error {ERR*} {r put.end syn:1 CHECKSUM a b}
        assert_equal pending [ofield syn:1 state]
        assert_equal OK [r put.revoke syn:1]
    }

    test {PUT.END CHECKSUM: GET.REPLICAS and OBJECT.INFO show it} {
        r put.start ck:1 100
        assert_equal OK [r put.end ck:1 CHECKSUM crc32c:deadbeef]
        set g [r get.replicas ck:1]
        assert_equal crc32c:deadbeef [lindex $g 2]
        assert_equal crc32c:deadbeef [ofield ck:1 checksum]
        # Binary-safe.
        set bin "a\x00b\r\nc"
        r put.start ck:2 100
        assert_equal OK [r put.end ck:2 checksum $bin]
        assert_equal $bin [lindex [r get.replicas ck:2] 2]
    }

    test {PUT.END CHECKSUM is bounded: a longer one is refused and the put stays pending} {
        r put.start ck:3 100
        set long [string repeat x 257]
        assert_error {ERR a checksum is at most 256 bytes} {r put.end ck:3 CHECKSUM $long}
        assert_equal pending [ofield ck:3 state]
        set most [string repeat y 256]
        assert_equal OK [r put.end ck:3 CHECKSUM $most]
        assert_equal $most [lindex [r get.replicas ck:3] 2]
    }

    test {PUT.REVOKE frees the pending space at once} {
        set used0 [istore store_pool_used]
        set revoked0 [istore store_puts_revoked]
        set c [redis_client]
        $c put.start rv:1 [expr {256 * $::KiB}]
        assert_equal [expr {$used0 + 256 * $::KiB}] [istore store_pool_used]
        assert_equal 1 [istore store_puts_pending]
        assert_error {NOTREADY*} {r get.replicas rv:1}
        assert_equal OK [$c put.revoke rv:1]
        # No waiting: the writer said it stopped writing.
        assert_equal $used0 [istore store_pool_used]
        assert_equal 0 [istore store_puts_pending]
        assert_equal [expr {$revoked0 + 1}] [istore store_puts_revoked]
        assert_equal {} [r get.replicas rv:1]
        assert_equal {} [r object.info rv:1]
        assert_error {NOKEY*} {$c put.revoke rv:1}
        assert_error {NOKEY*} {$c put.end rv:1}
        # The key can be put again by anyone.
        put rv:1 100
        assert_equal 100 [lindex [r get.replicas rv:1] 1]
        $c close
    }

    test {PIN / UNPIN and OBJECT.INFO pin} {
        put pin:1 100
        assert_equal none [ofield pin:1 pin]
        assert_equal OK [r pin pin:1]
        assert_equal soft [ofield pin:1 pin]
        # Default soft-pin-ttl: 30 min.
        assert_range [ofield pin:1 pin-ms] 1790000 1800000
        assert_equal OK [r pin pin:1 1000]
        assert_equal soft [ofield pin:1 pin]
        assert_range [ofield pin:1 pin-ms] 1 1000
        assert_equal OK [r pin pin:1 HARD]
        assert_equal hard [ofield pin:1 pin]
        assert_equal OK [r unpin pin:1]
        assert_equal none [ofield pin:1 pin]
        assert_equal 0 [ofield pin:1 pin-ms]
        assert_equal OK [r pin pin:1 hard]
        assert_equal hard [ofield pin:1 pin]
        assert_equal OK [r unpin pin:1]
        # A soft pin runs out.
        assert_equal OK [r pin pin:1 150]
        assert_equal soft [ofield pin:1 pin]
        after 250
        assert_equal none [ofield pin:1 pin]
        # A pending object can be pinned by its writer.
        r put.start pin:p 100
        assert_equal OK [r pin pin:p HARD]
        assert_equal hard [ofield pin:p pin]
        assert_equal OK [r put.end pin:p]
        assert_equal hard [ofield pin:p pin]
        # PUT.START options PIN and HARDPIN.
        put pin:o1 100 PIN 5000
        assert_equal soft [ofield pin:o1 pin]
        assert_range [ofield pin:o1 pin-ms] 4000 5000
        put pin:o2 100 HARDPIN
        assert_equal hard [ofield pin:o2 pin]
    }

    test {PIN errors: NOKEY, bad times, syntax; nothing changes} {
        put pin:2 100
        assert_error {NOKEY*} {r pin no-such-key}
        assert_error {NOKEY*} {r pin no-such-key HARD}
        assert_error {NOKEY*} {r unpin no-such-key}
        assert_error {ERR*} {r pin pin:2 0}
        assert_error {ERR*} {r pin pin:2 -5}
        assert_error {ERR*} {r pin pin:2 86400001}
        assert_error {ERR*} {r pin pin:2 abc}
        assert_error {ERR*} {r pin pin:2 HARD extra}
        assert_equal none [ofield pin:2 pin]
        # The bound follows max-soft-pin-ttl.
        assert_equal OK [r pin pin:2 86400000]
        assert_equal soft [ofield pin:2 pin]
        r unpin pin:2
        r config set max-soft-pin-ttl 5000
        # One owner of the bound (store.c): PIN and PUT.START PIN refuse in
        # the same words ...
        set why {ERR pin must be between 1 and max-soft-pin-ttl (5000) ms}
        assert_error $why {r pin pin:2 5001}
        assert_error $why {r put.start pin:3 100 PIN 5001}
        assert_equal {} [r object.info pin:3]
        assert_equal none [ofield pin:2 pin]
        assert_equal OK [r pin pin:2 5000]
        # ... and the default (soft-pin-ttl, here above the bound) is cut to it.
        r unpin pin:2
        r config set soft-pin-ttl 60000
        assert_equal OK [r pin pin:2]
        assert_range [ofield pin:2 pin-ms] 1 5000
        r config set soft-pin-ttl 1800000
        r config set max-soft-pin-ttl 86400000
    }

    test {REMOVE counts the keys it removed, pending ones included} {
        r remove.all
        put rm:a 100
        put rm:b 100
        r set rm:c value
        set c [redis_client]
        $c put.start rm:p 100
        assert_equal 3 [r remove rm:a rm:b rm:c rm:nothing]
        assert_equal 0 [r exists rm:a rm:b rm:c]
        assert_equal 1 [r remove rm:p]
        assert_equal 0 [istore store_puts_pending]
        assert_error {NOKEY*} {$c put.end rm:p}
        assert_equal 0 [r remove rm:a rm:p]
        # A key with a complete version and a pending replacement is one key.
        put rm:d 100
        $c put.start rm:d 200 REPLACE
        assert_equal 1 [r remove rm:d]
        assert_error {NOKEY*} {$c put.end rm:d}
        assert_equal {} [r object.info rm:d]
        $c close
    }

    test {REMOVE.ALL returns the count and empties, pending puts included} {
        r remove.all
        put ra:1 100
        put ra:2 100
        r set ra:3 v
        set c [redis_client]
        $c put.start ra:p 100
        assert_equal 4 [r remove.all]
        assert_equal 0 [r dbsize]
        assert_equal 0 [istore store_puts_pending]
        assert_equal 0 [istore store_objects]
        assert_error {NOKEY*} {$c put.end ra:p}
        assert_equal {} [r get.replicas ra:1]
        assert_equal 0 [r remove.all]
        $c close
    }

    test {REMOVE.ALL counts a key with a pending replacement once (as REMOVE does)} {
        r remove.all
        put rb:1 100
        r put.start rb:1 200 REPLACE
        assert_equal 1 [r remove.all]
    }

    test {Store commands on plain SET values} {
        r set sv:1 [string repeat x 300]
        set g [r get.replicas sv:1]
        assert_equal 4 [llength $g]
        assert_range [lindex $g 0] 9000 10000
        assert_equal 300 [lindex $g 1]
        assert_equal {} [lindex $g 2]
        assert_equal 1 [lindex $g 3 0]
        assert_equal 300 [lindex $g 3 2]
        assert_equal complete [ofield sv:1 state]
        assert_equal 300 [ofield sv:1 size]
        assert_range [r lease sv:1 20000] 19000 20000
        assert_equal OK [r pin sv:1 HARD]
        assert_equal hard [ofield sv:1 pin]
        assert_equal OK [r unpin sv:1]
        # An empty value has no extent and no replica.
        r set sv:empty ""
        set g [r get.replicas sv:empty]
        assert_equal 3 [llength $g]
        assert_equal 0 [lindex $g 1]
        assert_equal 0 [ofield sv:empty size]
        assert_equal {} [ofield sv:empty replicas]
        assert_equal 2 [r remove sv:1 sv:empty]
    }

    test {CONFIG SET of the store parameters validates and round-trips} {
        foreach {name good bad} {
            lease-ttl 1234 {0 -1 abc}
            put-timeout 4321 {-1 abc}
            put-release-timeout 5555 {-1 abc}
            soft-pin-ttl 60000 {0 -1 abc}
            max-soft-pin-ttl 7200000 {0 abc}
            default-replicas 3 {0 9 abc}
            allocation-strategy local-first {fastest "" 1}
        } {
            set old [lindex [r config get $name] 1]
            assert_equal OK [r config set $name $good]
            assert_equal [list $name $good] [r config get $name]
            foreach b $bad {
                assert_error {ERR*} {r config set $name $b}
                assert_equal [list $name $good] [r config get $name] "after CONFIG SET $name $b"
            }
            r config set $name $old
            assert_equal [list $name $old] [r config get $name]
        }
        assert_equal {allocation-strategy random} [r config get allocation-strategy]
        # soft-pin-ttl is PIN's default.
        r config set soft-pin-ttl 3000
        put sp:1 10
        r pin sp:1
        assert_range [ofield sp:1 pin-ms] 2000 3000
        r config set soft-pin-ttl 1800000
    }

    test {Batch forms: one element per key, errors and nils in place} {
        r remove.all
        set started0 [istore store_puts_started]
        set res [r batch.put.start 3 ba:a 100 ba:b 0 ba:c 100]
        assert_equal 3 [llength $res]
        assert_equal 1 [llength [lindex $res 0]]
        assert_equal 100 [lindex $res 0 0 2]
        assert_match {ERR*size*} [lindex $res 1]
        assert_equal 1 [llength [lindex $res 2]]
        assert_equal 100 [lindex $res 2 0 2]
        assert_equal [expr {$started0 + 2}] [istore store_puts_started]
        assert_equal 2 [istore store_puts_pending]
        assert_equal {} [r object.info ba:b]
        set res [r batch.put.end ba:a ba:b ba:c]
        assert_equal 3 [llength $res]
        assert_equal OK [lindex $res 0]
        assert_match {NOKEY*} [lindex $res 1]
        assert_equal OK [lindex $res 2]
        set res [r batch.get.replicas ba:a ba:missing ba:c]
        assert_equal 3 [llength $res]
        assert_equal 100 [lindex $res 0 1]
        assert_equal 4 [llength [lindex $res 0]]
        assert_equal {} [lindex $res 1]
        assert_equal 100 [lindex $res 2 1]
        assert_range [lindex $res 2 0] 9000 10000
        # A pending key in a batch read is a NOTREADY element.
        r put.start ba:p 10
        set res [r batch.get.replicas ba:p ba:a]
        assert_match {NOTREADY*} [lindex $res 0]
        assert_equal 100 [lindex $res 1 1]
        # EXISTS for a complete key in a batch start, options apply to all.
        set res [r batch.put.start 2 ba:a 100 ba:d 50 PIN 5000]
        assert_match {EXISTS*} [lindex $res 0]
        assert_equal 50 [lindex $res 1 0 2]
        assert_equal soft [ofield ba:d pin]
        assert_equal none [ofield ba:a pin]
        set res [r batch.put.end ba:d ba:p]
        assert_equal {OK OK} $res
        # The same key twice in one batch: the second is refused.
        set res [r batch.put.start 2 ba:dup 10 ba:dup 10]
        assert_equal 10 [lindex $res 0 0 2]
        assert_match {EXISTS*} [lindex $res 1]
        # Another connection's pending key is a NOTOWNER element.
        set c [redis_client]
        set res [$c batch.put.end ba:dup ba:a ba:none]
        assert_match {NOTOWNER*} [lindex $res 0]
        assert_match {NOTPENDING*} [lindex $res 1]
        assert_match {NOKEY*} [lindex $res 2]
        $c close
        assert_equal {OK} [r batch.put.end ba:dup]
    }

    test {Batch forms: bad numkeys or options fail the whole batch and change nothing} {
        set started0 [istore store_puts_started]
        set pending0 [istore store_puts_pending]
        foreach args {
            {0 bx:1 10}
            {-1 bx:1 10}
            {abc bx:1 10}
            {2 bx:1 10}
            {3 bx:1 10 bx:2 10}
            {1 bx:1 10 REPLICAS 0}
            {1 bx:1 10 FOO}
            {1 bx:1 10 PREFER nowhere}
        } {
            assert_error {ERR*} {r batch.put.start {*}$args}
            assert_equal $started0 [istore store_puts_started] "BATCH.PUT.START $args"
            assert_equal $pending0 [istore store_puts_pending] "BATCH.PUT.START $args"
            assert_equal {} [r object.info bx:1]
        }
        assert_error {ERR*wrong number*} {r batch.put.start 1 bx:1}
        assert_error {ERR*wrong number*} {r batch.put.end}
        assert_error {ERR*wrong number*} {r batch.get.replicas}
    }

    test {PUT.START bad input is refused and changes nothing} {
        r remove.all
        put bad:exists 100
        set long [string repeat k 4097]
        set cases [list \
            {bad:1 0} \
            {bad:1 -1} \
            {bad:1 abc} \
            {bad:1 10abc} \
            {bad:1 1.5} \
            {bad:1 1073741825} \
            {bad:1 99999999999999999999} \
            {bad:1 100 REPLICAS 0} \
            {bad:1 100 REPLICAS 9} \
            {bad:1 100 REPLICAS 1000000} \
            {bad:1 100 REPLICAS -1} \
            {bad:1 100 REPLICAS abc} \
            {bad:1 100 REPLICAS} \
            {bad:1 100 PREFER no-such-segment} \
            {bad:1 100 PREFER 999} \
            {bad:1 100 PIN abc} \
            {bad:1 100 PIN 0} \
            {bad:1 100 PIN -1} \
            {bad:1 100 PIN 86400001} \
            {bad:1 100 FOO} \
            {bad:1 100 REPLACE FOO} \
            {"" 100} \
            [list $long 100] \
            {bad:exists 0 REPLACE} \
            {bad:exists 100 REPLICAS 9 REPLACE} \
            {bad:exists 100 PREFER nowhere REPLACE} \
        ]
        set segs [r segments]
        set started [istore store_puts_started]
        set pending [istore store_puts_pending]
        set used [istore store_pool_used]
        set ex [oinfo_stable bad:exists]
        foreach args $cases {
            set what "PUT.START [string range $args 0 60]"
            if {[catch {r put.start {*}$args} err]} {
                assert_match {ERR*} $err $what
            } else {
                fail "$what was accepted: $err"
            }
            assert_equal {} [r object.info bad:1] $what
            assert_equal {} [r object.info $long] $what
            assert_equal $ex [oinfo_stable bad:exists] $what
            assert_equal $segs [r segments] $what
            assert_equal $started [istore store_puts_started] $what
            assert_equal $pending [istore store_puts_pending] $what
            assert_equal $used [istore store_pool_used] $what
        }
        assert_error {ERR*wrong number*} {r put.start bad:1}
        # The limits themselves are accepted.
        set k4096 [string repeat k 4096]
        assert_equal 1 [llength [r put.start $k4096 1]]
        assert_equal OK [r put.revoke $k4096]
        assert_equal 1 [llength [r put.start bad:1 100 REPLICAS 8 PIN 86400000]]
        assert_equal OK [r put.revoke bad:1]
    }

    test {max-object-size and max-key-size are honoured at their configured values} {
        # One owner of both rules (store.c): PUT.START, SET and RESTORE refuse
        # in the same words.
        r config set max-object-size 4096
        assert_error {ERR value is too large (max-object-size)} {r put.start mo:1 4097}
        assert_error {ERR value is too large (max-object-size)} {r set mo:1 [string repeat a 4097]}
        assert_equal {} [r object.info mo:1]
        assert_equal 4096 [lindex [put mo:1 4096] 0 2]
        r config set max-object-size 1gb
        r config set max-key-size 8
        assert_error {ERR key is too long (9 bytes, max-key-size is 8)} {r put.start 123456789 10}
        assert_error {ERR key is too long (9 bytes, max-key-size is 8)} {r set 123456789 v}
        assert_equal {} [r object.info 123456789]
        put 12345678 10
        r config set max-key-size 4096
        assert_error {ERR key must not be empty} {r put.start {} 10}
        assert_error {ERR size must be a positive integer} {r put.start mo:2 0}
    }
}

# ---------------------------------------------------------------------------
# Space that must not be reused yet: taken-over puts and leased objects.
# 1 MiB pool, objects of 400 KiB: two fit, a third does not.
# ---------------------------------------------------------------------------

start_server {tags {mooncake store} overrides {segment-size 1mb evict-policy noeviction lease-ttl 500}} {
    set big [expr {400 * 1024}]

    test {NOSPACE with noeviction and a full pool; nothing changes} {
        put full:1 $::MiB
        assert_equal $::MiB [istore store_pool_used]
        set objects [istore store_objects]
        set started [istore store_puts_started]
        set pending [istore store_puts_pending]
        set nospace [istore store_puts_nospace]
        set segs [r segments]
        assert_error {NOSPACE*} {r put.start ns:1 16}
        assert_error {NOSPACE*} {r put.start ns:1 1}
        assert_error {NOSPACE*} {r put.start full:1 16 REPLACE}
        assert_equal {} [r object.info ns:1]
        assert_equal 0 [ofield full:1 pending]
        assert_equal $objects [istore store_objects]
        assert_equal $started [istore store_puts_started]
        assert_equal $pending [istore store_puts_pending]
        assert_equal $::MiB [istore store_pool_used]
        assert_equal $segs [r segments]
        assert_equal [expr {$nospace + 3}] [istore store_puts_nospace]
        assert_equal 0 [istore store_evictions]
        # In a batch: a NOSPACE element.
        set res [r batch.put.start 1 ns:2 16]
        assert_match {NOSPACE*} [lindex $res 0]
        # Space back after REMOVE.
        assert_equal 1 [r remove full:1]
        assert_equal 16 [lindex [put ns:1 16] 0 2]
        r remove.all
    }
    test {Take-over after put-timeout; the old extent waits put-release-timeout} {
        r config set put-timeout 200
        r config set put-release-timeout 500
        set c1 [redis_client]
        set c2 [redis_client]
        set r1 [$c1 put.start to:1 $big]
        assert_equal $big [istore store_pool_used]
        set taken0 [istore store_puts_taken_over]
        # Younger than put-timeout: EXISTS, even with REPLACE.
        assert_error {EXISTS*} {$c2 put.start to:1 $big}
        assert_error {EXISTS*} {$c2 put.start to:1 $big REPLACE}
        assert_equal $taken0 [istore store_puts_taken_over]
        after 300
        set r2 [$c2 put.start to:1 $big]
        assert_equal [expr {$taken0 + 1}] [istore store_puts_taken_over]
        assert_equal 1 [istore store_puts_pending]
        assert_not_equal [lindex $r1 0 1] [lindex $r2 0 1]
        # The old extent is still allocated, on the deferred list.
        assert_equal [expr {2 * $big}] [istore store_pool_used]
        assert_morethan_equal [istore store_deferred_frees] 1
        set expiries0 [istore store_lease_expiries]
        # The old writer lost the key.
        assert_error {NOTOWNER*} {$c1 put.end to:1}
        assert_error {NOTOWNER*} {$c1 put.revoke to:1}
        # Not reused: a third object does not fit yet.
        assert_error {NOSPACE*} {r put.start to:other $big}
        wait_for_condition 40 50 {[istore store_pool_used] == $big} else {
            fail "taken-over extent not freed after put-release-timeout: used [istore store_pool_used]"
        }
        assert_equal 0 [istore store_deferred_frees]
        assert_equal [expr {$expiries0 + 1}] [istore store_lease_expiries]
        # Now it fits.
        assert_equal 1 [llength [put to:other $big]]
        assert_equal OK [$c2 put.end to:1]
        assert_equal $r2 [gr_replicas [r get.replicas to:1]]
        # The old writer's late PUT.END still cannot publish.
        assert_error {NOT*} {$c1 put.end to:1}
        assert_equal $r2 [gr_replicas [r get.replicas to:1]]
        $c1 close
        $c2 close
        r config set put-timeout 30000
        r config set put-release-timeout 600000
    }

    test {Take-over is not possible before put-timeout, and needs REPLACE for a complete key} {
        r remove.all
        r config set put-timeout 200
        r config set put-release-timeout 0
        put to:2 100
        set c1 [redis_client]
        set c2 [redis_client]
        $c1 put.start to:2 200 REPLACE
        after 300
        # Stale pending replacement, but the key is complete: REPLACE needed.
        assert_error {EXISTS*} {$c2 put.start to:2 300}
        set r2 [$c2 put.start to:2 300 REPLACE]
        assert_equal 300 [lindex $r2 0 2]
        # The complete version is untouched by the take-over.
        assert_equal 100 [lindex [r get.replicas to:2] 1]
        assert_error {NOTOWNER*} {$c1 put.end to:2}
        assert_equal OK [$c2 put.end to:2]
        assert_equal 300 [lindex [r get.replicas to:2] 1]
        $c1 close
        $c2 close
        r config set put-timeout 30000
        r config set put-release-timeout 600000
    }

    test {REMOVE of a pending put: the key goes at once, its space after put-release-timeout} {
        r remove.all
        wait_for_condition 100 50 {[istore store_pool_used] == 0} else {
            fail "pool not empty: [istore store_pool_used]"
        }
        r config set put-release-timeout 400
        set c [redis_client]
        $c put.start rp:1 $big
        assert_equal 1 [r remove rp:1]
        assert_equal {} [r object.info rp:1]
        assert_equal 0 [istore store_puts_pending]
        assert_error {NOKEY*} {$c put.end rp:1}
        # The writer may still be writing: the extent is not reused yet.
        assert_equal $big [istore store_pool_used]
        assert_equal 1 [istore store_deferred_frees]
        assert_equal 1 [llength [put rp:2 $big]]
        assert_error {NOSPACE*} {r put.start rp:3 $big}
        wait_for_condition 40 50 {[istore store_pool_used] == $big} else {
            fail "removed pending extent not freed: used [istore store_pool_used]"
        }
        assert_equal 1 [llength [put rp:3 $big]]
        $c close
        r config set put-release-timeout 600000
    }

    test {A leased object: REMOVE unlinks at once, the space waits for the lease} {
        r remove.all
        wait_for_condition 100 50 {[istore store_pool_used] == 0} else {
            fail "pool not empty: [istore store_pool_used]"
        }
        set reps [put ls:1 $big]
        set g [r get.replicas ls:1]
        assert_range [lindex $g 0] 400 500
        assert_equal 1 [r remove ls:1]
        assert_equal 0 [r exists ls:1]
        assert_equal {} [r get.replicas ls:1]
        assert_equal {} [r object.info ls:1]
        assert_equal 0 [r dbsize]
        assert_equal $big [istore store_pool_used]
        assert_morethan_equal [istore store_deferred_frees] 1
        # Not reused while leased: two more do not fit.
        assert_equal 1 [llength [put ls:2 $big]]
        assert_error {NOSPACE*} {r put.start ls:3 $big}
        wait_for_condition 40 50 {[istore store_pool_used] == $big} else {
            fail "leased extent not freed after the lease: used [istore store_pool_used]"
        }
        assert_equal 0 [istore store_deferred_frees]
        assert_equal 1 [llength [put ls:3 $big]]
    }

    test {A leased object: DEL and SET-overwrite unlink at once, the space waits} {
        r remove.all
        wait_for_condition 100 50 {[istore store_pool_used] == 0} else {
            fail "pool not empty: [istore store_pool_used]"
        }
        put ld:1 $big
        r get.replicas ld:1
        assert_equal 1 [r del ld:1]
        assert_equal 0 [r exists ld:1]
        assert_equal $big [istore store_pool_used]
        assert_equal 1 [istore store_deferred_frees]
        # SET over a leased object: new value visible, old extent kept.
        put ld:2 1000
        r get.replicas ld:2
        r set ld:2 abc
        assert_equal abc [r get ld:2]
        assert_equal 2 [istore store_deferred_frees]
        assert_morethan_equal [istore store_pool_used] [expr {$big + 1000}]
        wait_for_condition 40 50 {[istore store_deferred_frees] == 0} else {
            fail "deferred frees not done: [istore store_deferred_frees]"
        }
        assert_lessthan [istore store_pool_used] 100
        r del ld:2
        assert_equal 0 [istore store_pool_used]
        # A LEASE extends the wait.
        put ld:3 $big
        r get.replicas ld:3
        r lease ld:3 1500
        r remove ld:3
        after 800
        assert_equal $big [istore store_pool_used]
        wait_for_condition 40 50 {[istore store_deferred_frees] == 0} else {
            fail "deferred frees not done: [istore store_deferred_frees]"
        }
    }

    test {REPLACE of a leased version: the old extent waits for the lease after the swap} {
        r remove.all
        wait_for_condition 100 50 {[istore store_pool_used] == 0} else {
            fail "pool not empty: [istore store_pool_used]"
        }
        set old [put lr:1 $big]
        r get.replicas lr:1
        set new [r put.start lr:1 $big REPLACE]
        assert_equal OK [r put.end lr:1]
        assert_equal $new [gr_replicas [r get.replicas lr:1]]
        assert_equal [expr {2 * $big}] [istore store_pool_used]
        assert_equal 1 [istore store_deferred_frees]
        # The old extent must not be handed out yet: nothing else fits.
        assert_error {NOSPACE*} {r put.start lr:2 $big}
        wait_for_condition 40 50 {[istore store_deferred_frees] == 0} else {
            fail "deferred frees not done"
        }
        assert_equal $big [istore store_pool_used]
    }
}

# ---------------------------------------------------------------------------
# Eviction order: pins and leases. 1 MiB pool, objects of 256 KiB: exactly
# four fit. The watermark cron is off (evict-high-watermark 1.0), so only
# allocations that fail evict, one object each.
# ---------------------------------------------------------------------------

start_server {tags {mooncake store} overrides {segment-size 1mb evict-policy lru evict-high-watermark 1.0}} {
    set q [expr {256 * 1024}]

    test {PUT.START of an object larger than every segment does not evict anything} {
        put big:1 $q
        put big:2 $q
        set ev0 [istore store_evictions]
        assert_error {NOSPACE*} {r put.start big:huge [expr {2 * $::MiB}]}
        assert_equal 2 [r dbsize]
        assert_equal $ev0 [istore store_evictions]
        assert_equal 1 [r exists big:1]
        assert_equal 1 [r exists big:2]
        assert_equal {} [r object.info big:huge]
        r remove.all
        assert_equal 0 [istore store_pool_used]
    }

    test {Eviction: unpinned objects go first, hard and soft pins survive} {
        put ev:hard $q
        put ev:soft $q
        put ev:u1 $q
        put ev:u2 $q
        assert_equal $::MiB [istore store_pool_used]
        assert_equal OK [r pin ev:hard HARD]
        assert_equal OK [r pin ev:soft]
        set ev0 [istore store_evictions]
        for {set i 1} {$i <= 6} {incr i} {
            assert_equal 1 [llength [put ev:n$i $q]]
            assert_equal 1 [r exists ev:hard] "hard-pinned evicted at write $i"
            assert_equal 1 [r exists ev:soft] "soft-pinned evicted at write $i with unpinned objects left"
            assert_equal 1 [r exists ev:n$i]
            assert_equal 4 [r dbsize]
            assert_equal [expr {$ev0 + $i}] [istore store_evictions]
        }
        assert_equal 0 [r exists ev:u1 ev:u2]
    }

    test {Eviction: a leased object is not evicted; a soft pin goes when nothing unpinned is left} {
        # Keyspace: ev:hard (hard), ev:soft (soft) and two unpinned ones.
        set unpinned {}
        foreach k [r keys ev:n*] { lappend unpinned $k }
        assert_equal 2 [llength $unpinned]
        foreach k $unpinned { r get.replicas $k }
        set ev0 [istore store_evictions]
        # Nothing unpinned is evictable: the soft-pinned object goes.
        assert_equal 1 [llength [put ev:x1 $q]]
        assert_equal 0 [r exists ev:soft]
        assert_equal 1 [r exists ev:hard]
        foreach k $unpinned { assert_equal 1 [r exists $k] "leased $k evicted" }
        assert_equal [expr {$ev0 + 1}] [istore store_evictions]
        # ev:x1 is the only evictable one now.
        assert_equal 1 [llength [put ev:x2 $q]]
        assert_equal 0 [r exists ev:x1]
        assert_equal 1 [r exists ev:hard]
        foreach k $unpinned { assert_equal 1 [r exists $k] "leased $k evicted" }
        # Everything leased or hard-pinned: NOSPACE, nothing evicted.
        r pin ev:x2 HARD
        set ev1 [istore store_evictions]
        set keys [lsort [r keys *]]
        assert_error {NOSPACE*} {r put.start ev:x3 $q}
        assert_error {OOM*} {r set ev:x3 [string repeat x 1000]}
        assert_equal $ev1 [istore store_evictions]
        assert_equal $keys [lsort [r keys *]]
        assert_equal {} [r object.info ev:x3]
    }

    test {Eviction never touches pending puts} {
        r remove.all
        set c [redis_client]
        $c put.start ev:pend $q
        put ev:a $q
        put ev:b $q
        put ev:c $q
        for {set i 0} {$i < 3} {incr i} { put ev:m$i $q }
        assert_equal pending [ofield ev:pend state]
        assert_equal OK [$c put.end ev:pend]
        assert_equal $q [lindex [r get.replicas ev:pend] 1]
        $c close
    }

}

# ---------------------------------------------------------------------------
# The high watermark is per segment (mooncake.conf: "when the pool is fuller
# than evict-high-watermark"). It was a sum over every memory segment, so a
# large client segment, mostly empty as contributed memory is, kept a full
# pool from ever starting a round.
# ---------------------------------------------------------------------------

start_server {tags {mooncake store} overrides {segment-size 1mb evict-policy lru}} {
    test {Watermark eviction: a large client segment does not hide a full pool} {
        set m [redis_client]
        $m mount wm:big 1tb OWNER wm-owner
        put wm:remote 4096 PREFER wm:big
        set ev0 [get_info_field r stats evicted_keys]
        # 31 of the pool's 32 slots of 32 KiB: 97% full.
        for {set i 0} {$i < 31} {incr i} {
            assert_equal 1 [lindex [put wm:$i 32768 PREFER self] 0 0]
        }
        wait_for_condition 50 100 {
            [istore store_pool_used] <= 0.9 * $::MiB
        } else {
            fail "the pool stayed above the watermark: [istore store_pool_used] bytes used"
        }
        assert {[get_info_field r stats evicted_keys] > $ev0}
        # The round took objects of the full segment only.
        assert_equal 1 [r exists wm:remote]
        $m close
    }
}

# ---------------------------------------------------------------------------
# Placement over mounted segments. Mounts are made from a client that stays
# connected, so their owner stays alive.
# ---------------------------------------------------------------------------

start_server {tags {mooncake store} overrides {segment-size 16mb}} {
    set owner [redis_client]
    set m1 [$owner mount m1 16mb OWNER w1 HOST h1]
    set m2 [$owner mount m2 16mb OWNER w1 HOST h1]
    set m3 [$owner mount m3 16mb OWNER w1 HOST h2]

    test {REPLICAS 4 over self and three mounts: four distinct segments} {
        set reps [r put.start pl:1 4096 REPLICAS 4]
        assert_equal 4 [llength $reps]
        assert_equal [lsort -integer [list 1 $m1 $m2 $m3]] [lsort -integer [rep_segs $reps]]
        foreach rep $reps { assert_equal 4096 [lindex $rep 2] }
        assert_equal OK [r put.end pl:1]
        assert_equal $reps [gr_replicas [r get.replicas pl:1]]
        assert_equal $reps [ofield pl:1 replicas]
        foreach s [list $m1 $m2 $m3] {
            assert_equal 1 [dict get [r segment.info $s] objects]
            assert_equal 4096 [dict get [r segment.info $s] used]
        }
    }

    test {REPLICAS 8 with four segments gives four (best effort)} {
        set reps [r put.start pl:2 4096 REPLICAS 8]
        assert_equal 4 [llength $reps]
        assert_equal 4 [llength [lsort -unique [rep_segs $reps]]]
        r put.end pl:2
    }

    test {PREFER puts the first replica on the preferred segment} {
        for {set i 0} {$i < 10} {incr i} {
            set reps [r put.start pf:$i 100 PREFER m2]
            assert_equal [list $m2] [rep_segs $reps]
            set reps [r put.start pf:b$i 100 REPLICAS 3 PREFER m2]
            assert_equal 3 [llength $reps]
            assert_equal $m2 [lindex $reps 0 0]
            assert_equal 3 [llength [lsort -unique [rep_segs $reps]]]
        }
        # By id too, and several PREFERs in order.
        set reps [r put.start pf:id 100 REPLICAS 2 PREFER $m3 PREFER m1]
        assert_equal [list $m3 $m1] [rep_segs $reps]
        set reps [r put.start pf:self 100 PREFER self]
        assert_equal {1} [rep_segs $reps]
    }

    test {Distinct hosts are preferred: two h1 segments never both get an object} {
        for {set i 0} {$i < 20} {incr i} {
            set segs [rep_segs [r put.start dh:$i 100 REPLICAS 2]]
            assert_equal 2 [llength $segs]
            assert_equal 2 [llength [lsort -unique $segs]]
            assert {!([lsearch $segs $m1] >= 0 && [lsearch $segs $m2] >= 0)}
            # Three replicas: self, m3 and one of m1/m2.
            set segs [rep_segs [r put.start dh3:$i 100 REPLICAS 3]]
            assert_equal 3 [llength $segs]
            assert {[lsearch $segs 1] >= 0}
            assert {[lsearch $segs $m3] >= 0}
            assert {([lsearch $segs $m1] >= 0) + ([lsearch $segs $m2] >= 0) == 1}
        }
    }

    test {UNMOUNT returns the number of replicas dropped} {
        set m4 [$owner mount m4 1mb OWNER w1 HOST h4]
        r put.start um:1 100 PREFER m4
        r put.start um:2 100 PREFER m4
        r put.start um:3 100 PREFER m4 PREFER self REPLICAS 2
        r put.end um:1
        r put.end um:2
        r put.end um:3
        # A pending one on m4 counts as well.
        set pend0 [istore store_puts_pending]
        r put.start um:p 100 PREFER m4
        assert_equal 4 [dict get [r segment.info m4] objects]
        set um3 [r get.replicas um:3]
        set selfrep {}
        foreach rep [gr_replicas $um3] { if {[lindex $rep 0] == 1} { set selfrep $rep } }
        assert_equal 1 [lindex $selfrep 0]
        assert_equal 4 [r unmount m4]
        # Readers never see a replica on the unmounted segment.
        assert_equal {} [r get.replicas um:1]
        assert_equal {} [r get.replicas um:2]
        assert_equal {} [r object.info um:2]
        assert_equal [list $selfrep] [ofield um:3 replicas]
        assert_equal [list $selfrep] [gr_replicas [r get.replicas um:3]]
        assert_equal 1 [r exists um:3]
        # The keyspace and the pending table catch up (at once or within a
        # few cron ticks).
        wait_for_condition 50 20 {[r exists um:1 um:2] == 0 && [r object.info um:p] eq ""} else {
            fail "objects without replicas still there: exists [r exists um:1 um:2], pending [r object.info um:p]"
        }
        assert_error {NOKEY*} {r put.end um:p}
        assert_equal $pend0 [istore store_puts_pending]
    }

    test {COMMAND INFO of the store commands} {
        set names {put.start put.end put.revoke get.replicas lease pin unpin remove remove.all object.info batch.put.start batch.put.end batch.get.replicas}
        set info [r command info {*}$names]
        assert_equal [llength $names] [llength $info]
        set got {}
        foreach e $info { lappend got [lindex $e 0] [lindex $e 1] }
        assert_equal {put.start -3 put.end -2 put.revoke 2 get.replicas 2 lease 3 pin -2 unpin 2 remove -2 remove.all 1 object.info 2 batch.put.start -4 batch.put.end -2 batch.get.replicas -2} $got
        # Key positions, so cluster clients can route them.
        foreach e $info {
            if {[lindex $e 0] in {remove.all batch.put.start}} continue
            assert_equal 1 [lindex $e 3] "first key of [lindex $e 0]"
        }
        assert_equal {k} [r command getkeys put.start k 100]
        assert_equal {a b} [r command getkeys remove a b]
        assert_equal {a b} [r command getkeys batch.get.replicas a b]
    }

    test {COMMAND GETKEYS finds the keys of BATCH.PUT.START (cluster routing)} {
        assert_equal {a b} [r command getkeys batch.put.start 2 a 10 b 10]
        assert_equal {a b} [r command getkeys batch.put.start 2 a 10 b 10 REPLICAS 2]
    }

    test {default-replicas applies when PUT.START names no REPLICAS} {
        r config set default-replicas 3
        set reps [r put.start dr:1 100]
        assert_equal 3 [llength $reps]
        assert_equal 3 [llength [lsort -unique [rep_segs $reps]]]
        assert_equal 1 [llength [r put.start dr:2 100 REPLICAS 1]]
        r config set default-replicas 1
        assert_equal 1 [llength [r put.start dr:3 100]]
    }

    test {allocation-strategy local-first: the writer's host first} {
        # The test client connects from 127.0.0.1.
        set ml [$owner mount ml 16mb OWNER w1 HOST 127.0.0.1]
        set local [list $ml]
        if {[dict get [r segment.info self] host] in {127.0.0.1 localhost}} { lappend local 1 }
        r config set allocation-strategy local-first
        for {set i 0} {$i < 20} {incr i} {
            set reps [r put.start lf:$i 100]
            assert_equal 1 [llength $reps]
            assert {[lindex $reps 0 0] in $local}
            set reps [r put.start lf2:$i 100 REPLICAS 2]
            assert {[lindex $reps 0 0] in $local}
            assert_equal 2 [llength [lsort -unique [rep_segs $reps]]]
        }
        # PREFER still comes first.
        assert_equal [list $m3] [rep_segs [r put.start lf:p 100 PREFER m3]]
        r config set allocation-strategy random
        r unmount ml
    }

    $owner close
}

# ---------------------------------------------------------------------------
# Placement spread: free-ratio (two choices) must not send every write to a
# freshly mounted empty segment. Self is full, so only the mounts compete.
# ---------------------------------------------------------------------------

start_server {tags {mooncake store} overrides {segment-size 1mb evict-policy noeviction}} {
    test {free-ratio and random spread writes over all segments, fresh one included} {
        put fill:self $::MiB PREFER self
        set owner [redis_client]
        set ids {}
        foreach n {s1 s2 s3} {
            lappend ids [$owner mount $n 16mb OWNER w HOST h-$n]
            # Half full.
            r put.start fill:$n [expr {8 * $::MiB}] PREFER $n
            r put.end fill:$n
        }
        set fresh [$owner mount s4 16mb OWNER w HOST h-s4]
        lappend ids $fresh
        foreach strategy {free-ratio random} {
            r config set allocation-strategy $strategy
            assert_equal [list allocation-strategy $strategy] [r config get allocation-strategy]
            foreach id $ids { set count($id) 0 }
            for {set i 0} {$i < 200} {incr i} {
                set reps [r put.start $strategy:$i 4096]
                assert_equal 1 [llength $reps]
                set s [lindex $reps 0 0]
                assert {[info exists count($s)]}
                incr count($s)
            }
            set report {}
            foreach id $ids { lappend report $id $count($id) }
            foreach id $ids {
                if {$count($id) <= 20} { fail "$strategy: segment $id got $count($id) of 200 (segment count: $report)" }
            }
            if {$strategy eq "free-ratio"} {
                # Emptier segments are favoured, but not exclusively.
                foreach id [lrange $ids 0 2] {
                    if {$count($fresh) <= $count($id)} { fail "free-ratio: fresh segment $fresh not favoured (segment count: $report)" }
                }
            }
        }
        $owner close
    }
}

# ---------------------------------------------------------------------------
# Owner death drops replicas.
# ---------------------------------------------------------------------------

start_server {tags {mooncake store} overrides {segment-size 16mb owner-ttl 300}} {
    test {Owner death: replicas on its segment are dropped, sole-replica objects vanish} {
        set c [redis_client]
        set m1 [$c mount m1 16mb OWNER w1 HOST h1]
        set both [r put.start od:both 1000 REPLICAS 2]
        assert_equal [lsort -integer [list 1 $m1]] [lsort -integer [rep_segs $both]]
        r put.end od:both
        set only [r put.start od:only 1000 PREFER m1 REPLICAS 1]
        assert_equal [list $m1] [rep_segs $only]
        r put.end od:only
        r get.replicas od:only
        set selfrep {}
        foreach rep $both { if {[lindex $rep 0] == 1} { set selfrep $rep } }
        assert_equal 2 [r dbsize]
        $c close
        wait_for_condition 60 50 {[r segment.info m1] eq ""} else {
            fail "segment of a dead owner still mounted"
        }
        assert_equal [list $selfrep] [ofield od:both replicas]
        assert_equal [list $selfrep] [gr_replicas [r get.replicas od:both]]
        assert_equal {} [r get.replicas od:only]
        assert_equal {} [r object.info od:only]
        wait_for_condition 50 20 {[r exists od:only] == 0 && [r dbsize] == 1} else {
            fail "object without replicas still in the keyspace"
        }
        assert_equal 1000 [string length [r get od:both]]
    }

    test {UNMOUNT: a put left without replicas is gone at once, not in progress} {
        # Commands right after the UNMOUNT, before the reaper's cron slice
        # (MULTI: nothing runs in between), must not see the dead put: it
        # was -NOTREADY to readers and -EXISTS to a new writer.
        set c [redis_client]
        $c mount um1 1mb OWNER wu
        $c put.start um:dead 1000 PREFER um1
        set pend0 [istore store_pending_puts]
        r multi
        r unmount um1
        r get.replicas um:dead
        r put.start um:dead 1000 PREFER self
        r object.info um:dead
        set res [r exec]
        assert_equal 1 [lindex $res 0]
        assert_equal {} [lindex $res 1]
        assert_equal 1 [llength [lindex $res 2]]
        assert_equal pending [dict get [lindex $res 3] state]
        assert_equal $pend0 [istore store_pending_puts]
        # The first writer's put is no more: its PUT.END is NOTOWNER (the
        # key has another writer's put), its REVOKE too.
        assert_error {NOTOWNER*} {$c put.end um:dead}
        assert_equal OK [r put.end um:dead]
        $c close
    }
}

# ---------------------------------------------------------------------------
# Plain Redis GET of store objects.
# ---------------------------------------------------------------------------

start_server {tags {mooncake store} overrides {segment-size 16mb}} {
    set owner [redis_client]
    $owner mount m1 16mb OWNER w1 HOST h1

    test {Plain GET of a key with a self replica returns its bytes} {
        r put.start gt:local 1000 PREFER self PREFER m1 REPLICAS 2
        r put.end gt:local
        assert_equal 1000 [string length [r get gt:local]]
        assert_equal 1000 [r strlen gt:local]
        # The self replica second in the list.
        set reps [r put.start gt:local2 1000 PREFER m1 PREFER self REPLICAS 2]
        assert_equal [list [dict get [r segment.info m1] id] 1] [rep_segs $reps]
        r put.end gt:local2
        assert_equal 1000 [string length [r get gt:local2]]
        assert_equal 10 [string length [r getrange gt:local2 0 9]]
        # A pending key does not exist for GET.
        r put.start gt:pending 10
        assert_equal {} [r get gt:pending]
    }

    test {Plain GET of a key only on a mounted segment that has no endpoint is REMOTE} {
        r put.start gt:remote 1000 PREFER m1
        r put.end gt:remote
        assert_error {REMOTE*} {r get gt:remote}
        assert_error {REMOTE*} {r getrange gt:remote 0 9}
        assert_equal 1000 [r strlen gt:remote]
        set m [r mget gt:remote gt:nothing]
        assert_match {REMOTE*} [lindex $m 0]
        assert_equal {} [lindex $m 1]
        assert_equal PONG [r ping]
    }

    $owner close
}

start_server {tags {mooncake store} overrides {segment-size 16mb}} {
    set owner [redis_client]
    $owner mount rc1 16mb OWNER rc-owner HOST h1

    test {REPLICA.CLEAR drops objects no one reads: all replicas, or those in one segment} {
        # an object younger than lease-ttl counts as read (Mooncake's put
        # leaves it leased): kept, then cleared once lease-ttl has passed
        r put.start rc:young 100
        r put.end rc:young
        assert_equal {0} [r replica.clear 1 rc:young]
        r config set lease-ttl 100
        after 150
        assert_equal {1} [r replica.clear 1 rc:young]
        foreach {k where} {rc:a self rc:b rc1 rc:c rc1} {
            r put.start $k 100 PREFER $where
            r put.end $k
        }
        r put.start rc:both 100 REPLICAS 2 PREFER self PREFER rc1
        r put.end rc:both
        r put.start rc:pending 100
        after 150 ;# past lease-ttl
        # SEGMENT: only objects all of whose replicas are there; a key twice
        # counts once, missing and pending keys are skipped
        assert_equal {0 1 1 0 0 0} [r replica.clear 6 rc:a rc:b rc:c rc:c rc:both rc:pending SEGMENT rc1]
        assert_equal {0 1 1} [list [r exists rc:b] [r exists rc:a] [r exists rc:both]]
        # a lease in force keeps an object, until it ends
        r lease rc:a 2000
        assert_equal {0 1 0} [r replica.clear 3 rc:a rc:both nothing]
        after 2100
        assert_equal {1} [r replica.clear 1 rc:a]
        # an unknown segment clears nothing; the syntax is checked
        assert_equal {0} [r replica.clear 1 rc:pending SEGMENT nowhere]
        assert_error {ERR numkeys*} {r replica.clear 0 x}
        assert_error {ERR numkeys*} {r replica.clear 3 x}
        assert_error {ERR syntax*} {r replica.clear 1 x SEGMENT}
        assert_error {ERR syntax*} {r replica.clear 1 x OTHER rc1}
        assert_equal {rc:pending} [r command getkeys replica.clear 1 rc:pending SEGMENT rc1]
        r put.revoke rc:pending
        r config set lease-ttl 10000
    }

    $owner close
}
