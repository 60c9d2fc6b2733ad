# A tenant attacking another tenant's bytes on the data plane of the pool.
# tenants_hidden.tcl shows that naming another tenant's object answers as
# free space; these are the routes around that: ranges stretched past the
# tenant's own extent or wrapped around, extents it held a lease, a hold, an
# in-flight write or a queued read on that were removed and taken by another
# tenant, in-place values refused for a key, and MONITOR across an AUTH.
# Each attack must be refused and leave the victim's bytes as they were.

start_server {tags {acl mooncake} overrides {segment-size 16mb evict-policy noeviction}} {
    r acl setuser alice on >pa ~tenantA:* +@all
    r acl setuser bob on >pb ~tenantB:* +@all
    set ca [redis_client]
    $ca auth alice pa
    set cb [redis_client]
    $cb auth bob pb

    # bob's complete object key of n bytes of ch; returns its {seg off len}.
    proc bob_put {cb key n ch} {
        set rep [lindex [$cb put.start $key $n] 0]
        lassign $rep seg off len
        $cb seg.write $seg $off [string repeat $ch $n]
        $cb put.end $key
        return $rep
    }

    test {SEG.WRITE/READ of a tenant's own extent cannot be stretched into the next one, or wrapped} {
        r flushall
        lassign [lindex [$ca put.start tenantA:x 100] 0] seg aoff alen
        lassign [lindex [$cb put.start tenantB:y 100] 0] seg boff blen
        # Neighbours in the pool: bob's extent follows alice's.
        assert_lessthan $aoff $boff
        set refused {*range is not inside the extent of a pending object*}
        assert_error $refused {$ca seg.write $seg [expr {$aoff + 100}] X}
        assert_error $refused {$ca seg.write $seg [expr {$aoff + 50}] [string repeat X 51]}
        assert_error $refused {$ca seg.write $seg [expr {$boff - 1}] XX}
        assert_error $refused {$ca seg.write $seg 18446744073709551615 X}
        assert_error {*offset is not an unsigned integer*} {$ca seg.write $seg 18446744073709551616 X}
        # A vector with one good range writes nothing at all.
        assert_error "$refused (range 1)" {$ca seg.writev $seg $aoff A $boff X}
        $cb seg.write $seg $boff [string repeat B 100]
        $cb put.end tenantB:y
        $ca put.end tenantA:x
        set rrefused {*range is not inside the extent of a complete object*}
        assert_error $rrefused {$ca seg.read $seg $aoff 9223372036854775807}
        assert_error $rrefused {$ca seg.read $seg 18446744073709551615 2}
        assert_error $rrefused {$ca seg.read $seg $aoff 101}
        assert_error "$rrefused (range 1)" {$ca seg.readv $seg $aoff 1 [expr {$aoff + 99}] 2}
        assert_equal [string repeat \x00 100] [$ca seg.read $seg $aoff 100]
        assert_equal [string repeat B 100] [$cb get tenantB:y]
    }

    foreach how {lease hold} {
        test "A $how on a removed object gives no reach into the next tenant placed in its extent" {
            r flushall
            set c [redis_client]
            $c auth alice pa
            lassign [lindex [$c put.start tenantA:old 4000] 0] seg off len
            $c seg.write $seg $off [string repeat A 4000]
            $c put.end tenantA:old
            if {$how eq "lease"} { $c get.replicas tenantA:old } else { $c hold.replicas tenantA:old }
            $c rename tenantA:old tenantA:moved
            $c del tenantA:moved
            # Still alice's bytes while she holds them ...
            assert_equal [string repeat A 4000] [$c seg.read $seg $off 4000]
            if {$how eq "lease"} { $c lease.release tenantA:old } else { $c hold.release tenantA:old }
            # ... then the space is bob's.
            lassign [lindex [$cb put.start tenantB:new 4000] 0] bseg boff blen
            assert_equal [list $seg $off] [list $bseg $boff] "bob's put reuses alice's extent"
            assert_error {*not inside the extent of a pending object*} \
                {$c seg.write $seg $off [string repeat X 4000]}
            $cb seg.write $seg $off [string repeat B 4000]
            $cb put.end tenantB:new
            assert_error {*not inside the extent of a complete object*} {$c seg.read $seg $off 4000}
            assert_error {*not inside the extent of a complete object*} {$c seg.readv $seg $off 1}
            assert_equal [string repeat B 4000] [$cb get tenantB:new]
            $c close
        }
    }

    foreach how {remove put.revoke} {
        test "An in-place SEG.WRITE in flight keeps its extent from the next tenant ($how of the put)" {
            r flushall
            set n 1048576
            lassign [lindex [$ca put.start tenantA:big $n] 0] seg off len
            set fd [raw_connect]
            puts -nonewline $fd "*3\r\n\$4\r\nAUTH\r\n\$5\r\nalice\r\n\$2\r\npa\r\n"
            assert_match {+OK*} [gets $fd]
            puts -nonewline $fd "*4\r\n\$9\r\nSEG.WRITE\r\n\$[string length $seg]\r\n$seg\r\n"
            puts -nonewline $fd "\$[string length $off]\r\n$off\r\n\$$n\r\n[string repeat A [expr {$n / 2}]]"
            flush $fd
            # Placed: the payload holds a reference on the object.
            wait_for_condition 500 10 {
                [dict get [r object.info tenantA:big] refcount] >= 2
            } else { fail "the payload was not placed in the extent" }
            $ca $how tenantA:big
            lassign [lindex [$cb put.start tenantB:big $n] 0] bseg boff blen
            assert {$boff != $off}
            $cb seg.write $bseg $boff [string repeat B $n]
            $cb put.end tenantB:big
            puts -nonewline $fd "[string repeat A [expr {$n - $n / 2}]]\r\n"
            flush $fd
            assert_match {+OK*} [gets $fd]
            close $fd
            set v [$cb get tenantB:big]
            assert_equal $n [string length $v]
            assert_equal -1 [string first A $v]
            # The extent alice wrote into went back zeroed, not to bob.
            wait_for_condition 500 10 {
                [catch {$ca seg.read $seg $off 1}] == 1
            } else { fail "alice's removed extent is still readable" }
        }
    }

    test {A SEG.READ reply still being sent keeps its extent from the next tenant} {
        r flushall
        set n 1048576
        lassign [lindex [$ca put.start tenantA:r $n] 0] seg off len
        $ca seg.write $seg $off [string repeat A $n]
        $ca put.end tenantA:r
        set d [redis_deferring_client]
        $d auth alice pa
        assert_equal OK [$d read]
        # More than the socket buffers take: the rest waits in the server,
        # written from the extent (a reference each).
        set reads 24
        for {set i 0} {$i < $reads} {incr i} { $d seg.read $seg $off $n }
        wait_for_condition 500 10 {
            [dict get [r object.info tenantA:r] refcount] >= 2
        } else { fail "no SEG.READ reply waits in the server" }
        $ca del tenantA:r
        lassign [lindex [$cb put.start tenantB:r $n] 0] bseg boff blen
        assert {$boff != $off}
        $cb seg.write $bseg $boff [string repeat B $n]
        $cb put.end tenantB:r
        set want [string repeat A $n]
        for {set i 0} {$i < $reads} {incr i} {
            if {[$d read] ne $want} { fail "reply $i is not alice's bytes" }
        }
        $d close
        assert_equal [string repeat B $n] [$cb get tenantB:r]
    }

    test {An in-place SET value refused for another tenant's key changes nothing of its} {
        r flushall
        set n 40000
        $cb set tenantB:v [string repeat B $n]
        assert_error {*NOPERM*} {$ca set tenantB:v [string repeat X $n]}
        assert_error {*NOPERM*} {$ca mset tenantA:ok 1 tenantB:v [string repeat X $n]}
        assert_equal [string repeat B $n] [$cb get tenantB:v]
        assert_equal 0 [$ca exists tenantA:ok]
        # bob's freed value's extent, taken by alice's SET of the same size,
        # holds alice's bytes only.
        $cb del tenantB:v
        $ca set tenantA:v [string repeat A $n]
        assert_equal [string repeat A $n] [$ca get tenantA:v]
    }

    test {MONITOR: an AUTH inside another user's MULTI shows a tenant nothing run before it} {
        set m [redis_deferring_client]
        $m auth alice pa
        $m read
        $m monitor
        assert_equal OK [$m read]
        set c [redis_client]
        $c auth bob pb
        $c multi
        $c set tenantB:m topsecret
        $c auth alice pa
        assert_equal {OK OK} [$c exec]
        $c close
        $ca set tenantA:monitor-end v
        set seen {}
        while 1 {
            set line [read_with_timeout $m]
            lappend seen $line
            if {[string match {*tenantA:monitor-end*} $line]} break
        }
        $m close
        assert_no_match {*topsecret*} $seen
        assert_no_match {*tenantB*} $seen
        assert_equal topsecret [$cb get tenantB:m]
    }
}
