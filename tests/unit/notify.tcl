# Keyspace notifications (notify-keyspace-events, Redis's letters and
# channels) and the store's own events (class S, __store@0__:<event>).
#
# Untagged tests are Redis 7.0's behaviour and pass against redis-server
# too (./tests/runtest --server-binary /usr/bin/redis-server --single
# unit/notify); the store's events are mooncake-only.

# A deferring client listening to every keyspace and keyevent channel, and
# to the sentinel channel messages_until publishes to.
proc key_listener {{patterns {__keyspace@0__:* __keyevent@0__:*}}} {
    set c [redis_deferring_client]
    $c subscribe notify:end
    read_with_timeout $c
    foreach p $patterns {
        $c psubscribe $p
        read_with_timeout $c
    }
    return $c
}

# What the listener heard since the last call, as {channel payload} pairs.
proc heard {c} {
    set out {}
    foreach m [messages_until $c notify:end] { lappend out [list [lindex $m 2] [lindex $m 3]] }
    return $out
}

# The event names a listener heard on __keyevent@0__ channels, each with its key.
proc keyevents {c} {
    set out {}
    foreach e [heard $c] {
        lassign $e chan payload
        if {[string match {__keyevent@0__:*} $chan]} {
            lappend out [string range $chan 15 end] $payload
        }
    }
    return $out
}

start_server {tags {notify}} {
    test {notify-keyspace-events is empty by default: nothing is published} {
        assert_equal {} [lindex [r config get notify-keyspace-events] 1]
        set c [key_listener]
        r set n:a 1
        r del n:a
        set got [heard $c]
        $c close
        set got
    } {}

    test {CONFIG GET shows the classes in Redis's canonical order} {
        set out {}
        foreach v {KEA Kx Kn xeKE AKEm AKEn g$lshzxetdKE E$ g K ""} {
            r config set notify-keyspace-events $v
            lappend out [lindex [r config get notify-keyspace-events] 1]
        }
        r config set notify-keyspace-events ""
        set out
    } {AKE xK nK xeKE AKEm AKE AKE {$E} g K {}}

    test {An unknown class letter is refused and changes nothing} {
        r config set notify-keyspace-events Kg
        assert_error {*Invalid event class character*} {r config set notify-keyspace-events KEq}
        assert_equal gK [lindex [r config get notify-keyspace-events] 1]
        r config set notify-keyspace-events ""
    } {OK}

    test {K: __keyspace@0__:<key> carries the event; E: __keyevent@0__:<event> carries the key} {
        r config set notify-keyspace-events KEA
        set c [key_listener]
        r set "n key\x00\r\n" 1
        set got [heard $c]
        $c close
        r config set notify-keyspace-events ""
        set got
    } [list [list "__keyspace@0__:n key\x00\r\n" set] [list __keyevent@0__:set "n key\x00\r\n"]]

    test {A class without K or E publishes nothing; K or E alone publishes nothing either} {
        set c [key_listener]
        foreach v {g$ K E} {
            r config set notify-keyspace-events $v
            r set n:x 1
            r del n:x
        }
        set got [heard $c]
        $c close
        r config set notify-keyspace-events ""
        set got
    } {}

    test {Class filters: g gets del and expire, $ gets set, x expired} {
        set c [key_listener]
        r config set notify-keyspace-events Eg
        r set n:f 1
        r expire n:f 100
        r del n:f
        assert_equal {expire n:f del n:f} [keyevents $c]
        r config set notify-keyspace-events E$
        r set n:f 1
        r expire n:f 100
        r del n:f
        assert_equal {set n:f} [keyevents $c]
        r config set notify-keyspace-events Ex
        r set n:f 1 px 1
        wait_for_condition 50 20 {[r exists n:f] == 0} else { fail "n:f did not expire" }
        assert_equal {expired n:f} [keyevents $c]
        $c close
        r config set notify-keyspace-events ""
    } {OK}

    test {Events of the string and generic commands, named as Redis names them} {
        r config set notify-keyspace-events EA
        r set n:e 0
        set c [key_listener]
        r set n:e 1 ex 100
        r set n:e 2 keepttl
        r set n:e 3 px 100000 get
        r mset n:m1 1 n:m2 2
        r pexpire n:m1 100000
        r persist n:m1
        r persist n:m1
        r expire n:m1 -1
        r del n:m2 n:none
        r unlink n:e
        r set n:nx 1 nx
        r set n:nx 2 nx
        r set n:xx 1 xx
        r get n:none
        set got [keyevents $c]
        $c close
        r config set notify-keyspace-events ""
        set got
    } {set n:e expire n:e set n:e set n:e expire n:e set n:m1 set n:m2 expire n:m1 persist n:m1 del n:m1 del n:m2 del n:e set n:nx}

    test {Events of the rest of the string family and RENAME/COPY, named as Redis names them} {
        r flushall
        r config set notify-keyspace-events EA
        r set s:a 1
        set c [key_listener]
        r setnx s:b x
        r setex s:c 100 v
        r psetex s:d 100000 v
        r getset s:b y
        r msetnx s:e 1 s:f 2
        r append s:b z
        r setrange s:b 0 q
        r incr s:a
        r decrby s:a 2
        r incrbyfloat s:a 1.5
        r setbit s:g 3 1
        r getex s:c persist
        r getex s:d ex 50
        r getdel s:e
        r rename s:f s:h
        r copy s:h s:i
        r expireat s:h 1
        set got [keyevents $c]
        $c close
        r config set notify-keyspace-events ""
        set got
    } {set s:b set s:c expire s:c set s:d expire s:d set s:b set s:e set s:f append s:b setrange s:b incrby s:a incrby s:a incrbyfloat s:a setbit s:g persist s:c expire s:d del s:e rename_from s:f rename_to s:h copy_to s:i del s:h}

    test {n: new keys, before the command's own event; m: reads that miss (neither is in A)} {
        set c [key_listener]
        r config set notify-keyspace-events EA
        r set n:new 1
        r get n:none
        assert_equal {set n:new} [keyevents $c]
        r config set notify-keyspace-events {E$nm}
        r del n:new
        r set n:new 1
        r set n:new 2
        r get n:new
        r get n:none
        r mget n:none2 n:new
        r exists n:none3
        r strlen n:none4
        r set n:none5 v get
        set got [keyevents $c]
        $c close
        r config set notify-keyspace-events ""
        set got
    } {new n:new set n:new set n:new keymiss n:none keymiss n:none2 keymiss n:none3 keymiss n:none4 keymiss n:none5 new n:none5 set n:none5}

    test {m: TTL, PTTL, EXPIRETIME and PEXPIRETIME of a missing key are keymisses} {
        r flushall
        set c [key_listener]
        r config set notify-keyspace-events Em
        r set m:here v
        assert_equal -2 [r ttl m:t]
        assert_equal -2 [r pttl m:pt]
        assert_equal -2 [r expiretime m:et]
        assert_equal -2 [r pexpiretime m:pet]
        assert_equal -1 [r ttl m:here]
        set got [keyevents $c]
        $c close
        r config set notify-keyspace-events ""
        set got
    } {keymiss m:t keymiss m:pt keymiss m:et keymiss m:pet}

    test {SETBIT announces setbit only when the value changed (a new key, a longer value or a flipped bit)} {
        r flushall
        r set b:a "\x10"
        r config set notify-keyspace-events E$
        set c [key_listener]
        assert_equal 1 [r setbit b:a 3 1]
        assert_equal 0 [r setbit b:a 4 0]
        assert_equal 0 [r setbit b:a 4 1]
        assert_equal 0 [r setbit b:a 20 0]
        assert_equal 0 [r setbit b:new 5 0]
        set got [keyevents $c]
        $c close
        r config set notify-keyspace-events ""
        set got
    } {setbit b:a setbit b:a setbit b:new}

    test {RESTORE: restore (and new, even over a replaced key); a past TTL with REPLACE: del} {
        r set n:src v
        set dump [r dump n:src]
        r config set notify-keyspace-events EAn
        set c [key_listener]
        r restore n:r 0 $dump
        r restore n:r 0 $dump replace
        r restore n:r 1 $dump replace absttl
        r restore n:r2 1 $dump absttl
        set got [keyevents $c]
        $c close
        r config set notify-keyspace-events ""
        set got
    } {new n:r restore n:r new n:r restore n:r del n:r}

    # Redis deletes the destination and adds it again, so "new" comes even
    # when it replaced a key (found by tests/helpers/redis_diff.py: it came
    # here only for a free name).
    test {RENAME and COPY: new for the destination, even over a replaced key} {
        r flushall
        r mset rn:a 1 rn:b 2 rn:c 3
        r config set notify-keyspace-events {Egn}
        set c [key_listener]
        r rename rn:a rn:b
        r rename rn:b rn:free
        assert_equal 0 [r renamenx rn:free rn:c]
        r copy rn:free rn:c replace
        r copy rn:free rn:copy
        assert_equal 0 [r copy rn:free rn:c]
        set got [keyevents $c]
        $c close
        r config set notify-keyspace-events ""
        set got
    } {new rn:b rename_from rn:a rename_to rn:b new rn:free rename_from rn:b rename_to rn:free new rn:c copy_to rn:c new rn:copy copy_to rn:copy}

    test {FLUSHALL announces nothing per key} {
        r config set notify-keyspace-events KEA
        r set n:1 1
        set c [key_listener]
        r flushall
        set got [heard $c]
        $c close
        r config set notify-keyspace-events ""
        set got
    } {}

    test {Expired keys are announced whether a read or the active cycle finds them} {
        r config set notify-keyspace-events Ex
        set c [key_listener]
        for {set i 0} {$i < 20} {incr i} { r set n:exp:$i v px 20 }
        after 100
        # Read half of them now: lazily expired. The cycle takes the rest.
        for {set i 0} {$i < 10} {incr i} { r get n:exp:$i }
        wait_for_condition 100 20 {[r dbsize] == 0} else { fail "keys did not expire" }
        set keys {}
        foreach {ev k} [keyevents $c] { assert_equal expired $ev; lappend keys $k }
        $c close
        r config set notify-keyspace-events ""
        llength [lsort -unique $keys]
    } {20}
}

# ---------------------------------------------------------------- ours

# The fields of a store event's payload as a dict, the key included; the
# key runs to the end of the message, so it is split off first.
proc store_fields {payload} {
    set at [string first " key=" $payload]
    assert {$at > 0}
    set d [dict create key [string range $payload [expr {$at + 5}] end]]
    foreach kv [split [string range $payload 0 [expr {$at - 1}]] " "] {
        set eq [string first = $kv]
        dict set d [string range $kv 0 [expr {$eq - 1}]] [string range $kv [expr {$eq + 1}] end]
    }
    return $d
}

# What a store listener heard: {event {fields}} per message.
proc store_events {c} {
    set out {}
    foreach e [heard $c] {
        lassign $e chan payload
        assert_match {__store@0__:*} $chan
        set ev [string range $chan 12 end]
        if {$ev eq "flush"} {
            set d {}
            foreach kv [split $payload " "] { lassign [split $kv =] k v; dict set d $k $v }
            lappend out [list $ev $d]
        } else {
            lappend out [list $ev [store_fields $payload]]
        }
    }
    return $out
}

# event key size segments of each store event, for comparing.
proc store_brief {c} {
    set out {}
    foreach e [store_events $c] {
        lassign $e ev d
        if {$ev eq "flush"} {
            lappend out [list flush [dict get $d keys]]
        } else {
            lappend out [list $ev [dict get $d key] [dict get $d size] [dict get $d segments]]
        }
    }
    return $out
}

start_server {tags {notify mooncake} overrides {segment-size 16mb}} {
    set runid [get_info_field r server run_id]

    test {S is ours: accepted, shown after Redis's classes, not part of A} {
        set out {}
        foreach v {S AKES SKE S$ gS} {
            r config set notify-keyspace-events $v
            lappend out [lindex [r config get notify-keyspace-events] 1]
        }
        r config set notify-keyspace-events AKE
        set c [key_listener {__store@0__:*}]
        r put.start s:a 10
        r put.end s:a
        assert_equal {} [heard $c]
        $c close
        r config set notify-keyspace-events ""
        set out
    } {S ASKE SKE {$S} gS}

    test {put: PUT.END makes an object readable; the payload has node, size, segments and the key} {
        r config set notify-keyspace-events S
        set c [key_listener {__store@0__:*}]
        set key "s:spaced key \x00\r\n key=x"
        r put.start $key 4096
        assert_equal {} [heard $c]
        r put.end $key
        set ev [store_events $c]
        assert_equal 1 [llength $ev]
        lassign [lindex $ev 0] name d
        assert_equal put $name
        assert_equal [list node $runid size 4096 segments 1 key $key] \
            [list node [dict get $d node] size [dict get $d size] segments [dict get $d segments] key [dict get $d key]]
        $c close
        r config set notify-keyspace-events ""
        r remove $key
    } {1}

    test {S needs neither K nor E, and K/E add no store events to their channels} {
        r config set notify-keyspace-events S
        set c [key_listener {__store@0__:* __keyspace@0__:* __keyevent@0__:*}]
        r set s:kv 12345
        set h [heard $c]
        assert_equal 1 [llength $h]
        assert_equal __store@0__:put [lindex $h 0 0]
        r config set notify-keyspace-events SKE$
        r set s:kv 1
        set chans {}
        foreach e [heard $c] { lappend chans [lindex $e 0] }
        assert_equal {__keyevent@0__:set __keyspace@0__:s:kv __store@0__:put} [lsort $chans]
        $c close
        r config set notify-keyspace-events ""
    } {OK}

    test {Every way an object comes and goes: put, remove, expired, flush} {
        r flushall
        r config set notify-keyspace-events S
        set c [key_listener {__store@0__:*}]
        r set s:v hello
        r set s:v hello!
        r mset s:m1 a s:m2 bb
        r del s:m1
        r unlink s:m2 s:none
        r put.start s:p 100
        r put.end s:p
        r put.start s:p 200 REPLACE
        r put.end s:p
        r remove s:p s:none
        # A pending put that is revoked or removed was never readable.
        r put.start s:q 100
        r put.revoke s:q
        r put.start s:q 100
        r remove s:q
        r batch.put.start 2 s:b1 10 s:b2 20
        r batch.put.end s:b1 s:b2
        r expire s:b1 -1
        r set s:t x px 10
        wait_for_condition 50 20 {[r exists s:t] == 0} else { fail "s:t did not expire" }
        r flushall
        set got [store_brief $c]
        $c close
        r config set notify-keyspace-events ""
        set got
    } {{put s:v 5 1} {put s:v 6 1} {put s:m1 1 1} {put s:m2 2 1} {remove s:m1 1 1} {remove s:m2 2 1} {put s:p 100 1} {put s:p 200 1} {remove s:p 200 1} {put s:b1 10 1} {put s:b2 20 1} {remove s:b1 10 1} {put s:t 1 1} {expired s:t 1 1} {flush 2}}

    test {REMOVE.ALL: one flush event with the count of readable keys} {
        r set s:1 a
        r set s:2 b
        r put.start s:pending 10
        r config set notify-keyspace-events S
        set c [key_listener {__store@0__:*}]
        assert_equal 3 [r remove.all]
        set got [store_brief $c]
        $c close
        r config set notify-keyspace-events ""
        set got
    } {{flush 2}}

    test {Redis's classes for the store commands: PUT.END is set, REMOVE is del} {
        r config set notify-keyspace-events {E$g}
        set c [key_listener]
        r put.start s:r 10
        r put.end s:r
        r pin s:r
        r get.replicas s:r
        r remove s:r s:none
        set got [keyevents $c]
        $c close
        r config set notify-keyspace-events ""
        set got
    } {set s:r del s:r}

    test {lost: objects whose every replica goes with an unmounted segment} {
        set owner [redis_client]
        set seg [$owner mount s:seg 1mb OWNER s:w HOST s:h]
        r put.start s:only 100 PREFER s:seg
        r put.end s:only
        r put.start s:both 100 PREFER s:seg PREFER self REPLICAS 2
        r put.end s:both
        r config set notify-keyspace-events S
        set c [key_listener {__store@0__:*}]
        assert_equal 2 [r unmount s:seg]
        # The keyspace catches up at the next lookup or within a few cron ticks.
        wait_for_condition 100 20 {[r dbsize] == 1} else { fail "s:only was not dropped" }
        set got [store_brief $c]
        $c close
        $owner close
        r config set notify-keyspace-events ""
        r flushall
        set got
    } {{lost s:only 100 {}}}
}

# The high watermark at 1.0: eviction only when a write finds no room, so
# no cron round evicts behind the test's back.
start_server {tags {notify mooncake} overrides {segment-size 16mb evict-policy lru evict-high-watermark 1.0}} {
    test {evicted: Redis's e class and the store's event name the keys eviction took} {
        set v [pattern_bytes 1048576 1]
        r config set notify-keyspace-events ESe
        set c [key_listener {__store@0__:* __keyevent@0__:*}]
        for {set i 0} {$i < 30} {incr i} { r set e:$i $v }
        set redis {}
        set store {}
        foreach e [heard $c] {
            lassign $e chan payload
            if {$chan eq "__keyevent@0__:evicted"} { lappend redis $payload }
            if {$chan eq "__store@0__:evicted"} {
                set d [store_fields $payload]
                assert_equal 1048576 [dict get $d size]
                lappend store [dict get $d key]
            }
        }
        $c close
        r config set notify-keyspace-events ""
        assert_morethan [llength $redis] 0
        assert_equal $redis $store
        # Every evicted key is gone; every key not announced is still there.
        foreach k $redis { assert_equal 0 [r exists $k] }
        assert_equal [expr {30 - [llength $redis]}] [r dbsize]
        assert_equal [llength $redis] [get_info_field r stats evicted_keys]
    }
}

start_server {tags {notify mooncake} overrides {segment-size 64mb}} {
    test {A store-event subscriber that stops reading is cut off; puts go on} {
        r config set client-output-buffer-limit "pubsub 1mb 0 0"
        r config set notify-keyspace-events S
        set c [redis_deferring_client]
        $c psubscribe __store@0__:*
        read_with_timeout $c
        set id [lindex [regexp -inline {id=(\d+)} [r client list type pubsub]] 1]
        # Keys long enough that 5000 events (20 MiB) are far more than the
        # socket buffers and the limit hold together.
        set pad [string repeat k 4000]
        for {set i 0} {$i < 5000} {incr i} {
            r put.start $pad:$i 16 REPLACE
            r put.end $pad:$i
            if {$i % 500 == 0 && [r client list id $id] eq ""} break
        }
        wait_for_condition 50 20 {[r client list id $id] eq ""} else {
            fail "the store-event subscriber was not cut off"
        }
        assert_morethan [get_info_field r stats client_output_buffer_limit_disconnections] 0
        catch {$c close}
        r config set client-output-buffer-limit "pubsub 32mb 8mb 60"
        r config set notify-keyspace-events ""
        r put.start after 16
        r put.end after
    } {OK}

    test {redis-py: keyspace notifications and store events} {
        set out [exec /usr/bin/python3 [file join $::harness(testsdir) helpers redis_py_pubsub.py] \
                     [srv 0 host] [srv 0 port] --store 2>@1]
        assert_match "*ok store put payload*ALL OK*" $out
    }
}
