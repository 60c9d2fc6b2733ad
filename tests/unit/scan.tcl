# SCAN: a full iteration returns every key that exists throughout it at
# least once, whatever COUNT, MATCH and TYPE say and however the keyspace
# grows or shrinks meanwhile; and it agrees with KEYS.

# Run a full SCAN with extra arguments; returns the keys, sorted, without
# duplicates. Also checks the shape of every reply and that it ends.
proc scan_all {args} {
    set cursor 0
    set seen {}
    set calls 0
    while 1 {
        set reply [r scan $cursor {*}$args]
        assert_equal 2 [llength $reply]
        lassign $reply cursor keys
        assert {[string is wideinteger -strict $cursor] || [regexp {^[0-9]+$} $cursor]}
        foreach k $keys { dict set seen $k 1 }
        if {$cursor eq "0"} break
        if {[incr calls] > 100000} { fail "SCAN does not terminate" }
    }
    return [lsort [dict keys $seen]]
}

proc fill_keys {prefix n} {
    set args {}
    for {set i 0} {$i < $n} {incr i} { lappend args $prefix$i $i }
    r mset {*}$args
}

start_server {tags {scan}} {
    test {SCAN of an empty keyspace} {
        r flushall
        r scan 0
    } {0 {}}

    test {SCAN returns every key (1000 keys)} {
        r flushall
        fill_keys key: 1000
        set keys [scan_all]
        assert_equal 1000 [llength $keys]
        for {set i 0} {$i < 1000} {incr i} {
            if {[lsearch -exact -sorted $keys key:$i] < 0} { fail "key:$i missing" }
        }
    }

    foreach count {1 5 100 10000} {
        test "SCAN COUNT $count returns every key" {
            set keys [scan_all COUNT $count]
            llength $keys
        } {1000}
    }

    test {SCAN COUNT is a hint: a single call may return many keys} {
        set reply [r scan 0 COUNT 10000]
        assert_equal 0 [lindex $reply 0]
        llength [lindex $reply 1]
    } {1000}

    test {SCAN MATCH} {
        fill_keys other: 100
        set keys [scan_all MATCH key:1*]
        # key:1, key:10..19, key:100..199
        assert_equal 111 [llength $keys]
        foreach k $keys { assert_match key:1* $k }
        assert_equal 100 [llength [scan_all MATCH other:* COUNT 7]]
        assert_equal {} [scan_all MATCH nomatch*]
    }

    test {SCAN TYPE string} {
        assert_equal 1100 [llength [scan_all TYPE string]]
        assert_equal {} [scan_all TYPE list]
    }

    test {SCAN MATCH, COUNT and TYPE together} {
        llength [scan_all MATCH other:?? COUNT 3 TYPE string]
    } {90}

    test {SCAN and KEYS agree} {
        assert_equal [lsort [r keys *]] [scan_all]
        assert_equal [lsort [r keys key:2?]] [scan_all MATCH key:2?]
        assert_equal [lsort [r keys {other:[1-3]*}]] [scan_all MATCH {other:[1-3]*}]
    }

    test {SCAN with an invalid cursor} {
        assert_error {ERR invalid cursor*} {r scan abc}
        assert_error {ERR invalid cursor*} {r scan 1.5}
        assert_error {ERR invalid cursor*} {r scan " 1"}
        assert_error {ERR invalid cursor*} {r scan "1 "}
        assert_error {ERR invalid cursor*} {r scan 18446744073709551616}
    }

    # As Redis reads a cursor (strtoul): a sign, leading zeros and "" are
    # accepted, "-1" is the largest cursor (found by tests/helpers/redis_diff.py:
    # "SCAN -1" was an error here, a page in Redis).
    test {SCAN accepts the cursors Redis accepts} {
        r flushall
        r set k 1
        foreach cur {"" 00 +0 -0} {
            assert_equal {0 k} [r scan $cur COUNT 100]
        }
        foreach cur {-1 18446744073709551615 +5} {
            set reply [r scan $cur]
            assert_equal 2 [llength $reply]
            assert_equal 1 [string is digit -strict [lindex $reply 0]]
        }
        r flushall
    } {OK}

    test {SCAN syntax errors} {
        assert_error {ERR syntax error*} {r scan 0 COUNT 0}
        assert_error {ERR syntax error*} {r scan 0 MATCH}
        assert_error {ERR syntax error*} {r scan 0 FOO bar}
        assert_error {ERR value is not an integer or out of range*} {r scan 0 COUNT abc}
        assert_error {ERR wrong number of arguments for 'scan' command*} {r scan}
    }

    test {SCAN does not return expired keys} {
        r flushall
        fill_keys live: 50
        for {set i 0} {$i < 50} {incr i} { r set dead:$i v PX 30 }
        after 120
        scan_all MATCH dead:*
    } {}

    test {SCAN returns keys that exist throughout while the keyspace grows} {
        r flushall
        fill_keys old: 1000
        set cursor 0
        set seen {}
        set n 0
        while 1 {
            lassign [r scan $cursor COUNT 20] cursor keys
            foreach k $keys { dict set seen $k 1 }
            # Grow the keyspace between the first calls, to 5000 keys: the
            # table must resize a few times during the iteration.
            if {$n < 20} {
                set args {}
                for {set j 0} {$j < 200} {incr j} { lappend args new:$n:$j x }
                r mset {*}$args
            }
            if {[incr n] > 100000} { fail "SCAN does not terminate" }
            if {$cursor eq "0"} break
        }
        set missing 0
        for {set i 0} {$i < 1000} {incr i} {
            if {![dict exists $seen old:$i]} { incr missing }
        }
        set missing
    } {0}

    test {SCAN returns keys that exist throughout while the keyspace shrinks} {
        r flushall
        fill_keys stay: 500
        fill_keys go: 3000
        set cursor 0
        set seen {}
        set n 0
        while 1 {
            lassign [r scan $cursor COUNT 20] cursor keys
            foreach k $keys { dict set seen $k 1 }
            set args {}
            for {set j 0} {$j < 100 && $n < 3000} {incr j; incr n} { lappend args go:$n }
            if {[llength $args]} { r del {*}$args }
            if {$cursor eq "0"} break
        }
        set missing 0
        for {set i 0} {$i < 500} {incr i} {
            if {![dict exists $seen stay:$i]} { incr missing }
        }
        set missing
    } {0}

    test {SCAN with binary keys} {
        r flushall
        set k1 "bin\x00key"
        set k2 "bin\r\nkey"
        r set $k1 a
        r set $k2 b
        lsort [scan_all]
    } [lsort [list "bin\x00key" "bin\r\nkey"]]
}
