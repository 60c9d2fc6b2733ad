# The data plane of the server's own pool (SPEC §4.3): SEG.WRITE into the
# extent of a pending object, SEG.READ out of a complete one, SHM.ATTACH only
# on unix sockets. Every refusal is checked to change nothing: the bytes of
# the values around it, OBJECT.INFO and the data counters are compared
# before and after. Large payloads take the in-place path (read straight
# into the extent) and large replies the from-the-pool path, so both sizes
# are covered. The client side (libmooncake over shm and tcp, hosted
# segments) is tested by tests/c/test_mooncake*.c.

proc stat {field} { get_info_field r stats $field }

# A pending put of size bytes; returns {seg offset len} of its one replica.
proc pend {key size} {
    lindex [r put.start $key $size] 0
}

start_server {tags {mooncake dataplane} overrides {segment-size 4mb evict-policy noeviction}} {

    test {SEG.WRITE fills a pending extent, SEG.READ and GET see it after PUT.END} {
        lassign [pend dp:1 10] seg off len
        assert_equal 1 $seg
        assert_equal 10 $len
        assert_equal OK [r seg.write $seg $off hello]
        assert_equal OK [r seg.write $seg [expr {$off + 5}] world]
        # Pending: not readable through the data plane either.
        assert_error {*not inside the extent of a complete object*} {r seg.read $seg $off 10}
        assert_equal OK [r put.end dp:1]
        assert_equal helloworld [r seg.read $seg $off 10]
        assert_equal low [r seg.read $seg [expr {$off + 3}] 3]
        assert_equal helloworld [r get dp:1]
    }

    test {SEG.WRITE refuses ranges outside a pending extent and writes nothing} {
        lassign [pend dp:2 8] seg off len
        r seg.write $seg $off abcdefgh
        r put.end dp:2
        lassign [pend dp:3 8] seg3 off3 len3
        set w0 [stat data_write_bytes]
        # Into a complete object.
        assert_error {*not inside the extent of a pending object*} {r seg.write $seg $off XXXXXXXX}
        # Straddling the end of the pending one (9 bytes into 8).
        assert_error {*not inside the extent of a pending object*} {r seg.write $seg3 $off3 123456789}
        # Starting one byte past its end, into the 16-byte rounding.
        assert_error {*not inside*} {r seg.write $seg3 [expr {$off3 + 8}] Z}
        # Free space, the segment's end, beyond it, and offsets that overflow.
        assert_error {*not inside*} {r seg.write 1 [expr {4 * 1048576 - 1}] Z}
        assert_error {*not inside*} {r seg.write 1 [expr {4 * 1048576}] Z}
        assert_error {*not inside*} {r seg.write 1 18446744073709551615 Z}
        assert_error {*unsigned integer*} {r seg.write 1 18446744073709551616 Z}
        assert_error {*unsigned integer*} {r seg.write 1 -1 Z}
        assert_error {*not inside*} {r seg.write $seg3 $off3 ""}
        assert_equal abcdefgh [r get dp:2]
        assert_equal $w0 [stat data_write_bytes]
        r put.revoke dp:3
    }

    test {SEG.WRITEV fills several pending extents, SEG.READV reads them back in order} {
        lassign [pend dpv:1 5] seg o1 l1
        lassign [pend dpv:2 7] seg2 o2 l2
        assert_equal $seg $seg2
        set w0 [stat data_write_bytes]
        assert_equal OK [r seg.writev $seg $o1 hello $o2 goodbye]
        assert_equal [expr {$w0 + 12}] [stat data_write_bytes]
        r put.end dpv:1
        r put.end dpv:2
        set r0 [stat data_read_bytes]
        assert_equal {goodbye hello} [r seg.readv $seg $o2 7 $o1 5]
        assert_equal [expr {$r0 + 12}] [stat data_read_bytes]
        # Sub-ranges, like SEG.READ.
        assert_equal {ell odb} [r seg.readv $seg [expr {$o1 + 1}] 3 [expr {$o2 + 2}] 3]
        list [r get dpv:1] [r get dpv:2]
    } {hello goodbye}

    test {A SEG.WRITEV with one bad range writes none of its ranges} {
        lassign [pend dpv:3 4] seg o3 l3
        lassign [pend dpv:4 4] seg o4 l4
        r seg.write $seg $o3 AAAA
        r seg.write $seg $o4 BBBB
        lassign [r put.start dpv:5 4] rep5
        r seg.write 1 [lindex $rep5 1] CCCC
        r put.end dpv:5
        set w0 [stat data_write_bytes]
        # The second range straddles dpv:4's end.
        assert_error {*not inside the extent of a pending object*(range 1)*} {r seg.writev $seg $o3 xxxx $o4 yyyyy}
        # The second range is a complete object's.
        assert_error {*(range 1)*} {r seg.writev $seg $o3 xxxx [lindex $rep5 1] zzzz}
        assert_equal $w0 [stat data_write_bytes]
        r put.end dpv:3
        r put.end dpv:4
        list [r get dpv:3] [r get dpv:4] [r get dpv:5]
    } {AAAA BBBB CCCC}

    test {A SEG.READV with one bad range sends nothing but the error} {
        lassign [pend dpv:6 4] seg o6 l6
        r seg.write $seg $o6 DDDD
        set r0 [stat data_read_bytes]
        lassign [lindex [r get.replicas dpv:3] 3] _ o3 _
        # dpv:6 is still pending.
        assert_error {*not inside the extent of a complete object*(range 1)*} {r seg.readv $seg $o3 4 $o6 4}
        assert_error {*bad length*} {r seg.readv $seg $o3 0}
        assert_error {*bad length*} {r seg.readv $seg $o3 -4}
        assert_error {*bad length*} {r seg.readv $seg $o3 four}
        assert_equal $r0 [stat data_read_bytes]
        r put.revoke dpv:6
        r ping
    } {PONG}

    test {SEG.WRITEV and SEG.READV want pairs of arguments} {
        assert_error {*wrong number of arguments*} {r seg.writev 1 0}
        assert_error {*wrong number of arguments*} {r seg.writev 1 0 x 16}
        assert_error {*wrong number of arguments*} {r seg.readv 1 0 4 16}
        assert_error {*no such segment*} {r seg.readv 99 0 4}
        r ping
    } {PONG}

    test {SEG.READ refuses what is not a complete extent} {
        lassign [pend dp:4 100] seg off len
        r seg.write $seg $off [string repeat x 100]
        r put.end dp:4
        assert_error {*not inside*} {r seg.read $seg $off 101}
        assert_error {*not inside*} {r seg.read $seg $off 0}
        assert_error {*not inside*} {r seg.read $seg $off -5}
        assert_error {*not an integer*} {r seg.read $seg $off abc}
        assert_error {*not inside*} {r seg.read 1 [expr {4 * 1048576 - 16}] 16}
        # Freed space: after DEL (no lease) the extent is gone.
        r del dp:4
        assert_error {*not inside*} {r seg.read $seg $off 100}
    }

    test {A leased object stays readable through the data plane after DEL} {
        lassign [pend dp:5 6] seg off len
        r seg.write $seg $off leased
        r put.end dp:5
        r get.replicas dp:5
        r del dp:5
        assert_equal leased [r seg.read $seg $off 6]
    }

    test {Unknown and hosted segments are refused} {
        assert_error {*no such segment*} {r seg.read 999 0 1}
        assert_error {*no such segment*} {r seg.write 999 0 x}
        assert_error {*unsigned integer*} {r seg.read self 0 1}
        set id [r mount dp-remote 1048576]
        assert_error {*hosted by its owner*} {r seg.read $id 0 1}
        r unmount dp-remote
    }

    test {SHM.ATTACH needs a unix socket} {
        assert_error {*needs a unix socket*} {r shm.attach 1}
    }

    test {Large payloads are read in place; refused ones are drained, the connection goes on} {
        set size 300000
        lassign [pend dp:big $size] seg off len
        set val [pattern_bytes $size 7]
        set inplace0 [stat values_read_in_place]
        assert_equal OK [r seg.write $seg $off $val]
        assert_equal [expr {$inplace0 + 1}] [stat values_read_in_place]
        r put.end dp:big
        # A large forged write into the complete value: refused, payload dropped.
        assert_error {*not inside the extent of a pending object*} {r seg.write $seg $off [pattern_bytes $size 9]}
        assert_equal PONG [r ping]
        set sent0 [stat values_sent_from_pool]
        set got [r seg.read $seg $off $size]
        assert_equal [expr {$sent0 + 1}] [stat values_sent_from_pool]
        assert {$got eq $val}
        assert {[r get dp:big] eq $val}
        # A slice from the middle.
        assert {[r seg.read $seg [expr {$off + 1000}] 50000] eq [string range $val 1000 50999]}
    }

    test {A large SEG.WRITE with a wrong argument count places nothing} {
        set size 100000
        lassign [pend dp:arity $size] seg off len
        set val [pattern_bytes $size 3]
        r seg.write $seg $off $val
        # The payload's header arrives before the extra argument: it must not
        # be read into the extent of a command that will be refused.
        assert_error {*wrong number of arguments*} {r seg.write $seg $off [pattern_bytes $size 4] extra}
        r put.end dp:arity
        assert {[r get dp:arity] eq $val}
    }

    test {A client killed mid-SEG.WRITE leaves the object pending, and revoke frees it} {
        lassign [pend dp:kill 200000] seg off len
        set fd [raw_connect]
        puts -nonewline $fd "*4\r\n\$9\r\nSEG.WRITE\r\n\$[string length $seg]\r\n$seg\r\n\$[string length $off]\r\n$off\r\n\$200000\r\n"
        puts -nonewline $fd [string repeat A 50000]
        flush $fd
        close $fd
        assert_error {*NOTREADY*} {r get.replicas dp:kill}
        assert_equal pending [dict get [r object.info dp:kill] state]
        assert_equal OK [r put.revoke dp:kill]
        assert_equal {} [r get.replicas dp:kill]
    }

    test {SEGMENT.INFO self lists the server's endpoints} {
        set eps [dict get [r segment.info self] endpoints]
        assert {[lsearch -exact $eps "tcp://[srv 0 host]:[srv 0 port]"] >= 0}
    }

    test {The data commands are in COMMAND} {
        foreach c {seg.write seg.read shm.attach} {
            assert_equal 1 [llength [r command info $c]]
        }
        assert_equal 4 [lindex [lindex [r command info seg.write] 0] 1]
    }
}

# INCR writes its digits over the old ones (as Redis changes its integer in
# place) only where no one else can be reading them: a version under a
# lease, or held by a second reference, gets a new version instead, and
# its bytes stay what the reader was given (store.c, "Immutability").
start_server {tags {mooncake dataplane} overrides {segment-size 4mb lease-ttl 10000}} {

    # {seg offset len} of key's one replica; GET.REPLICAS grants a lease.
    proc leased_replica {key} { lindex [r get.replicas $key] 3 }

    test {INCR of an unread counter changes it in place: same extent, new bytes} {
        r set ip:1 10
        lassign [leased_replica ip:1] seg off len
        r lease.release ip:1
        assert_equal 11 [r incr ip:1]
        assert_equal 12 [r incrby ip:1 1]
        assert_equal "$seg $off 2" [leased_replica ip:1]
        assert_equal 12 [r seg.read $seg $off 2]
        assert_equal 12 [r get ip:1]
        assert_equal int [r object encoding ip:1]
        r lease.release ip:1
    }

    test {INCR under a lease writes a new version; the leased bytes do not change} {
        r set ip:2 41
        lassign [leased_replica ip:2] seg off len
        assert_equal 42 [r incr ip:2]
        assert_equal 41 [r seg.read $seg $off 2]
        assert_equal 42 [r get ip:2]
        lassign [leased_replica ip:2] seg2 off2 len2
        assert {$off2 != $off}
        # Leased again: INCR leaves these bytes alone too.
        assert_equal 43 [r incr ip:2]
        assert_equal 42 [r seg.read $seg2 $off2 2]
        assert_equal 43 [r get ip:2]
    }

    test {INCR keeps its result right across lengths, signs and the header's cache} {
        r set ip:3 8
        assert_equal 9 [r incr ip:3]
        assert_equal 10 [r incr ip:3]
        assert_equal 9 [r decr ip:3]
        assert_equal -1 [r incrby ip:3 -10]
        assert_equal 4294967295 [r incrby ip:3 4294967296]
        assert_equal 4294967296 [r incr ip:3]
        assert_equal 4294967295 [r decr ip:3]
        assert_equal 4294967295 [r get ip:3]
        assert_equal 11 [r append ip:3 x]
        assert_error {*not an integer*} {r incr ip:3}
        r set ip:3 5
        assert_equal 6 [r incr ip:3]
        assert_equal 6 [r get ip:3]
        assert_equal 11 [r incrbyfloat ip:3 5]
        assert_equal embstr [r object encoding ip:3]
        assert_equal 12 [r incr ip:3]
        assert_equal int [r object encoding ip:3]
    }

    test {INCR in place is a change for WATCH, COPY keeps the old value} {
        r set ip:4 1
        r copy ip:4 ip:4c
        set c [redis_client]
        r watch ip:4
        assert_equal 2 [$c incr ip:4]
        r multi
        r get ip:4
        assert_equal {} [r exec]
        assert_equal 1 [r get ip:4c]
        assert_equal 2 [r incr ip:4c]
        assert_equal 2 [r get ip:4]
        $c close
    }

    test {SET of an unread value as long as the old one writes over it: same extent} {
        r set sp:1 abc
        lassign [leased_replica sp:1] seg off len
        r lease.release sp:1
        assert_equal OK [r set sp:1 xyz]
        assert_equal "$seg $off 3" [leased_replica sp:1]
        assert_equal xyz [r seg.read $seg $off 3]
        assert_equal xyz [r get sp:1]
        r lease.release sp:1
        # Another length: a new version elsewhere.
        assert_equal OK [r set sp:1 abcd]
        assert_equal abcd [r get sp:1]
        assert {[lindex [leased_replica sp:1] 1] != $off}
        r lease.release sp:1
    }

    test {SET under a lease, or beside a second reference, writes a new version} {
        r set sp:2 old
        lassign [leased_replica sp:2] seg off len
        assert_equal OK [r set sp:2 new]
        assert_equal old [r seg.read $seg $off 3]
        assert_equal new [r get sp:2]
        r lease.release sp:2
        r set sp:3 one
        r copy sp:3 sp:3c
        assert_equal OK [r set sp:3 two]
        assert_equal one [r get sp:3c]
        assert_equal two [r get sp:3]
        # A pinned value: the new version is not pinned (and not in place).
        foreach how {HARD 60000} {
            r set sp:p pin
            r pin sp:p $how
            lassign [leased_replica sp:p] seg off len
            r lease.release sp:p
            assert_equal OK [r set sp:p new]
            assert_equal none [dict get [r object.info sp:p] pin]
            assert_equal new [r get sp:p]
            assert {[lindex [leased_replica sp:p] 1] != $off}
            r lease.release sp:p
            r del sp:p
        }
        # GETSET and SET GET answer the old bytes while the new ones land.
        assert_equal two [r getset sp:3 six]
        assert_equal six [r set sp:3 ten get]
        assert_equal ten [r get sp:3]
    }

    test {SET in place: the TTL, encoding, WATCH and accounting as a new version's} {
        r set sp:4 12 ex 1000
        set used [get_info_field r store store_pool_used]
        assert_equal 13 [r incr sp:4]
        assert_equal int [r object encoding sp:4]
        assert_equal OK [r set sp:4 ab]
        assert_equal -1 [r ttl sp:4]
        assert_equal embstr [r object encoding sp:4]
        assert_error {*not an integer*} {r incr sp:4}
        assert_equal OK [r set sp:4 cd keepttl]
        assert_equal -1 [r ttl sp:4]
        assert_equal OK [r set sp:4 ef ex 500]
        assert_range [r ttl sp:4] 490 500
        assert_equal OK [r set sp:4 gh keepttl]
        assert_range [r ttl sp:4] 490 500
        assert_equal OK [r set sp:4 12]
        assert_equal 13 [r incr sp:4]
        assert_equal $used [get_info_field r store store_pool_used]
        set c [redis_client]
        r watch sp:4
        assert_equal OK [$c set sp:4 99]
        r multi
        r get sp:4
        assert_equal {} [r exec]
        $c close
        assert_equal 0 [r setnx sp:4 77]
        assert_equal OK [r set sp:4 55 xx]
        assert_equal 55 [r get sp:4]
    }

    test {INCR in place keeps the TTL and the memory accounting} {
        r set ip:5 100 ex 1000
        set used [get_info_field r store store_pool_used]
        assert_equal 101 [r incr ip:5]
        assert_range [r ttl ip:5] 990 1000
        assert_equal $used [get_info_field r store store_pool_used]
        assert_equal 3 [r strlen ip:5]
        assert_equal 01 [r getrange ip:5 1 2]
        set d [r dump ip:5]
        r del ip:5
        r restore ip:5 0 $d
        assert_equal 102 [r incr ip:5]
    }
}
