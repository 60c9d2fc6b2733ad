# Segments and owners (SPEC §3 "Segment", "Owners"; §4.2 MOUNT, UNMOUNT,
# SEGMENTS, SEGMENT.INFO, HEARTBEAT): the server's own segment `self`,
# MOUNT with every option, idempotent re-mounts and -EXISTS, never-reused
# ids, argument validation, immediate and GRACEFUL unmounts, owner liveness
# (connections, HEARTBEAT, owner-ttl, -NEEDREMOUNT), INFO segments, the
# owner-ttl parameter and the commands' COMMAND entries.

# The fields of a segment description, in the order the server sends them.
set ::segment_fields {id name owner size used tier host endpoints base rkey objects state free}

# Number of mounted segments according to SEGMENTS.
proc seg_count {{client r}} {
    llength [$client segments]
}

# The ids listed by SEGMENTS, in order.
proc seg_ids {{client r}} {
    set ids {}
    foreach s [$client segments] { lappend ids [dict get $s id] }
    return $ids
}

# One field of SEGMENT.INFO name-or-id ("" if the segment is not mounted).
proc seg_field {name field {client r}} {
    set info [$client segment.info $name]
    if {$info eq ""} { return "" }
    return [dict get $info $field]
}

# The INFO segments line of segment id, or "".
proc seg_info_line {id {client r}} {
    set info [$client info segments]
    if {[regexp -line "^segment_$id:(.*)\r?$" $info -> v]} { return [string trim $v] }
    return {}
}

start_server {tags {mooncake segments} overrides {segment-size 16mb}} {
    set segsize [expr {16 * 1024 * 1024}]

    test {SEGMENTS on a fresh server lists only segment self, id 1} {
        set all [r segments]
        assert_equal 1 [llength $all]
        set s [lindex $all 0]
        assert_equal $::segment_fields [dict keys $s]
        assert_equal 1 [dict get $s id]
        assert_equal self [dict get $s name]
        assert_equal self [dict get $s owner]
        assert_equal $segsize [dict get $s size]
        assert_equal memory [dict get $s tier]
        assert_equal active [dict get $s state]
        # The pool is reachable where the server listens (t_data.c).
        set eps [dict get $s endpoints]
        assert {[lsearch -exact $eps "tcp://[srv 0 host]:[srv 0 port]"] >= 0}
        foreach ep $eps { assert {[string match tcp://* $ep] || [string match unix://* $ep]} }
        assert_equal 0 [dict get $s base]
        assert_equal 0 [dict get $s objects]
        assert_equal $segsize [expr {[dict get $s used] + [dict get $s free]}]
    }

    test {SEGMENT.INFO self and SEGMENT.INFO 1 give the same map (RESP2 flat list)} {
        set byname [r segment.info self]
        assert_equal {*26} [r lastheader]
        set byid [r segment.info 1]
        assert_equal {*26} [r lastheader]
        assert_equal $byname $byid
        assert_equal $byname [lindex [r segments] 0]
        assert_equal 26 [llength $byname]
        assert_equal 1 [dict get $byname id]
    }

    test {SEGMENT.INFO and SEGMENTS under RESP3 are maps} {
        set c [redis_client]
        $c hello 3
        set m [$c segment.info self]
        assert_equal {%13} [$c lastheader]
        assert_equal [r segment.info self] $m
        assert_equal $m [$c segment.info 1]
        assert_equal {%13} [$c lastheader]
        set all [$c segments]
        assert_equal {*1} [$c lastheader]
        assert_equal [list $m] $all
        $c close
    }

    test {SEGMENT.INFO of an unknown segment is null} {
        assert_equal {} [r segment.info no-such-segment]
        assert_match {[_$]*} [r lastheader]
        assert_equal {} [r segment.info 999999]
    }

    test {MOUNT with every option returns a new id and SEGMENT.INFO shows every field} {
        set id [r mount full 1048576 ENDPOINT tcp://10.0.0.1:7000 ENDPOINT rdma://10.0.0.1:7001 \
                    BASE 0x7f0000001000 RKEY rk-123 TIER disk HOST node-1 OWNER proc-1]
        assert {[string is wideinteger -strict $id]}
        assert_morethan $id 1
        set s [r segment.info full]
        assert_equal $::segment_fields [dict keys $s]
        assert_equal $id [dict get $s id]
        assert_equal full [dict get $s name]
        assert_equal proc-1 [dict get $s owner]
        assert_equal 1048576 [dict get $s size]
        assert_equal 0 [dict get $s used]
        assert_equal disk [dict get $s tier]
        assert_equal node-1 [dict get $s host]
        assert_equal {tcp://10.0.0.1:7000 rdma://10.0.0.1:7001} [dict get $s endpoints]
        assert_equal [expr {0x7f0000001000}] [dict get $s base]
        assert_equal rk-123 [dict get $s rkey]
        assert_equal 0 [dict get $s objects]
        assert_equal active [dict get $s state]
        assert_equal 1048576 [dict get $s free]
        # By id too, and listed by SEGMENTS.
        assert_equal $s [r segment.info $id]
        assert_equal 2 [seg_count]
        assert_equal [list 1 $id] [seg_ids]
    }

    test {MOUNT: BASE in decimal, TIER memory and vram, unix endpoint} {
        set id1 [r mount tdec 8192 BASE 140737488355328 TIER memory OWNER proc-1]
        set id2 [r mount tvram 8192 TIER vram ENDPOINT unix:///tmp/mc.sock OWNER proc-1]
        assert_morethan $id2 $id1
        assert_equal 140737488355328 [seg_field tdec base]
        assert_equal memory [seg_field tdec tier]
        assert_equal vram [seg_field tvram tier]
        assert_equal {unix:///tmp/mc.sock} [seg_field tvram endpoints]
        assert_equal 0 [seg_field tvram base]
        assert_equal {} [seg_field tvram rkey]
        # Options are case-insensitive and TIER values too.
        set id3 [r mount tcase 8192 tier VRAM owner proc-1]
        assert_equal vram [seg_field tcase tier]
        assert_equal proc-1 [seg_field tcase owner]
        assert_equal 0 [r unmount tdec]
        assert_equal 0 [r unmount tvram]
        assert_equal 0 [r unmount tcase]
    }

    test {MOUNT without HOST records the client's address, without the port} {
        r mount nohost 4096 OWNER proc-1
        set h [seg_field nohost host]
        r unmount nohost
        set h
    } {127.0.0.1}

    test {MOUNT sizes with units} {
        r mount unit-gb 1gb OWNER proc-1
        r mount unit-kb 64kb OWNER proc-1
        r mount unit-min 4096 OWNER proc-1
        assert_equal 1073741824 [seg_field unit-gb size]
        assert_equal 1073741824 [seg_field unit-gb free]
        assert_equal 65536 [seg_field unit-kb size]
        assert_equal 4096 [seg_field unit-min size]
        foreach n {unit-gb unit-kb unit-min} { assert_equal 0 [r unmount $n] }
        assert_equal {} [r segment.info unit-gb]
    }

    test {MOUNT is idempotent for the same name, owner and size} {
        set id [r mount idem 65536 OWNER proc-1]
        set before [r segments]
        assert_equal $id [r mount idem 65536 OWNER proc-1]
        assert_equal $id [r mount idem 64kb OWNER proc-1]
        # Another connection of the same owner gets the same id as well.
        set c [redis_client]
        assert_equal $id [$c mount idem 65536 OWNER proc-1]
        $c close
        assert_equal $before [r segments]
    }

    test {MOUNT of a taken name by another owner or with another size is -EXISTS} {
        set before [r segments]
        assert_error {EXISTS*} {r mount idem 65536 OWNER proc-2}
        assert_equal $before [r segments]
        assert_error {EXISTS*} {r mount idem 131072 OWNER proc-1}
        assert_equal $before [r segments]
        # Without OWNER the connection's default owner is not proc-1.
        assert_error {EXISTS*} {r mount idem 65536}
        assert_equal $before [r segments]
        assert_equal proc-1 [seg_field idem owner]
        assert_equal 65536 [seg_field idem size]
    }

    test {MOUNT self is -EXISTS, whatever the owner and size} {
        set before [r segments]
        assert_error {EXISTS*} {r mount self 4096 OWNER proc-1}
        assert_equal $before [r segments]
        assert_error {EXISTS*} {r mount self $segsize OWNER self}
        assert_equal $before [r segments]
        assert_error {EXISTS*} {r mount self $segsize}
        assert_equal $before [r segments]
    }

    test {Segment ids are never reused} {
        set a [r mount reuse-a 4096 OWNER proc-1]
        assert_equal 0 [r unmount reuse-a]
        set b [r mount reuse-b 4096 OWNER proc-1]
        assert_morethan $b $a
        set a2 [r mount reuse-a 4096 OWNER proc-1]
        assert_morethan $a2 $b
        assert_equal {} [r segment.info $a]
        assert_equal reuse-a [seg_field $a2 name]
        r unmount reuse-a
        r unmount reuse-b
        # The highest id so far plus one, not any freed one.
        set c [r mount reuse-c 4096 OWNER proc-1]
        assert_equal [expr {$a2 + 1}] $c
        r unmount reuse-c
    }

    test {MOUNT refuses bad arguments and changes nothing} {
        set before [r segments]
        set long257 [string repeat n 257]
        set ep17 {}
        for {set i 0} {$i < 17} {incr i} { lappend ep17 ENDPOINT tcp://h:[expr {7000 + $i}] }
        set cases [list \
            {v0 0} \
            {v1 100} \
            {v2 4095} \
            {v3 -1} \
            {v4 abc} \
            {v5 1125899906842625} \
            {v6 2000tb} \
            {v7 99999999999999999999999} \
            [list "a b" 4096] \
            [list "" 4096] \
            [list $long257 4096] \
            [list "tab\tname" 4096] \
            {v8 4096 ENDPOINT http://x} \
            [list v9 4096 {*}$ep17] \
            {v10 4096 BASE -1} \
            {v11 4096 BASE xyz} \
            {v12 4096 BASE 0x} \
            {v13 4096 TIER ssd} \
            {v14 4096 COLOR blue} \
            {v15 4096 TIER} \
            {v16 4096 OWNER proc-1 HOST} \
            {v17 4096 RKEY ""} \
            {v18 4096 HOST ""} \
            [list v19 4096 OWNER "w 1"] \
            [list v20 4096 OWNER ""] \
            {v21 4096 ENDPOINT http://x OWNER proc-1} \
        ]
        foreach args $cases {
            if {[catch {r mount {*}$args} err]} {
                assert_match {ERR*} $err "MOUNT $args"
            } else {
                fail "MOUNT [string range $args 0 80] was accepted (id $err)"
            }
            assert_equal $before [r segments] "after MOUNT [string range $args 0 80]"
        }
    }

    test {MOUNT accepts the limits: 1 PiB, a 256-char name, 16 endpoints} {
        set n256 [string repeat n 256]
        set ep16 {}
        for {set i 0} {$i < 16} {incr i} { lappend ep16 ENDPOINT tcp://h:[expr {7000 + $i}] }
        set id [r mount $n256 4096 OWNER proc-1 {*}$ep16]
        assert_equal $n256 [seg_field $id name]
        assert_equal 16 [llength [seg_field $id endpoints]]
        assert_equal tcp://h:7015 [lindex [seg_field $id endpoints] end]
        assert_equal 0 [r unmount $id]
        set big [r mount pib 1125899906842624 OWNER proc-1]
        assert_equal 1125899906842624 [seg_field $big size]
        assert_equal 0 [r unmount pib]
    }

    test {UNMOUNT by name and by id returns 0 and the segment disappears} {
        set before [r segments]
        set a [r mount un-a 4096 OWNER proc-1]
        set b [r mount un-b 4096 OWNER proc-1]
        assert_equal [expr {[llength $before] + 2}] [seg_count]
        assert_equal 0 [r unmount un-a]
        assert_equal {} [r segment.info un-a]
        assert_equal {} [r segment.info $a]
        assert_equal 0 [r unmount $b]
        assert_equal {} [r segment.info un-b]
        assert_equal $before [r segments]
        # A second UNMOUNT finds nothing.
        assert_error {ERR*no such segment*} {r unmount un-a}
        assert_error {ERR*no such segment*} {r unmount $b}
    }

    test {UNMOUNT refuses self and unknown segments} {
        set before [r segments]
        assert_error {ERR*} {r unmount self}
        assert_error {ERR*} {r unmount 1}
        assert_error {ERR*no such segment*} {r unmount nothing-here}
        assert_error {ERR*no such segment*} {r unmount 424242}
        assert_error {ERR*} {r unmount self GRACEFUL 10}
        assert_equal $before [r segments]
        assert_equal active [seg_field self state]
    }

    test {UNMOUNT GRACEFUL: draining, then gone} {
        set id [r mount drain 65536 OWNER proc-1]
        set t0 [clock milliseconds]
        assert_equal 0 [r unmount drain GRACEFUL 300]
        assert_equal draining [seg_field drain state]
        assert_equal draining [seg_field $id state]
        set listed 0
        foreach s [r segments] {
            if {[dict get $s name] eq "drain"} {
                assert_equal draining [dict get $s state]
                set listed 1
            }
        }
        assert_equal 1 $listed
        assert_match {name=drain,*state=draining} [seg_info_line $id]
        wait_for_condition 30 50 {[r segment.info drain] eq ""} else {
            fail "draining segment still mounted after 1.5 s: [r segment.info drain]"
        }
        assert_morethan_equal [expr {[clock milliseconds] - $t0}] 250
        assert_equal {} [seg_info_line $id]
        assert_error {ERR*no such segment*} {r unmount drain}
    }

    test {UNMOUNT GRACEFUL with a bad time or syntax changes nothing} {
        r mount drain2 4096 OWNER proc-1
        set before [r segments]
        assert_error {ERR*} {r unmount drain2 GRACEFUL -1}
        assert_error {ERR*} {r unmount drain2 GRACEFUL abc}
        assert_error {ERR*} {r unmount drain2 GRACEFUL}
        assert_error {ERR*} {r unmount drain2 SOON 10}
        assert_equal $before [r segments]
        assert_equal active [seg_field drain2 state]
        after 300
        assert_equal active [seg_field drain2 state]
        assert_equal 0 [r unmount drain2]
    }

    test {UNMOUNT GRACEFUL 0 unmounts on the next cron tick} {
        r mount drain0 4096 OWNER proc-1
        assert_equal 0 [r unmount drain0 graceful 0]
        wait_for_condition 20 50 {[r segment.info drain0] eq ""} else {
            fail "GRACEFUL 0 segment still mounted"
        }
    }

    test {INFO segments: a count and one line per segment} {
        set id [r mount info-seg 8192 TIER disk OWNER proc-1]
        set info [r info segments]
        assert_match "*# Segments*" $info
        set n [get_info_field r segments segments]
        assert_equal [seg_count] $n
        assert_morethan $n 1
        foreach s [r segments] {
            set line [seg_info_line [dict get $s id]]
            assert_match "name=[dict get $s name],owner=[dict get $s owner],*" $line
            assert_match "*,state=[dict get $s state]" $line
        }
        assert_equal "name=info-seg,owner=proc-1,tier=disk,size=8192,used=0,objects=0,state=active" [seg_info_line $id]
        assert_match "name=self,owner=self,tier=memory,size=$segsize,*,state=active" [seg_info_line 1]
        assert {[string is integer -strict [get_info_field r segments owners]]}
        r unmount info-seg
        assert_equal [expr {$n - 1}] [get_info_field r segments segments]
        assert_equal {} [seg_info_line $id]
    }

    test {CONFIG SET / GET owner-ttl} {
        set old [lindex [r config get owner-ttl] 1]
        assert_equal 10000 $old
        assert_equal OK [r config set owner-ttl 2000]
        assert_equal {owner-ttl 2000} [r config get owner-ttl]
        assert_error {ERR*} {r config set owner-ttl -1}
        assert_error {ERR*} {r config set owner-ttl abc}
        assert_equal {owner-ttl 2000} [r config get owner-ttl]
        r config set owner-ttl $old
        assert_equal [list owner-ttl $old] [r config get owner-ttl]
    }

    test {COMMAND INFO of the segment commands} {
        set info [r command info mount unmount segments segment.info heartbeat]
        assert_equal 5 [llength $info]
        set arity {}
        foreach e $info { lappend arity [lindex $e 0] [lindex $e 1] }
        assert_equal {mount -3 unmount -2 segments 1 segment.info 2 heartbeat 2} $arity
        assert_error {ERR*wrong number of arguments*} {r mount onlyname}
        assert_error {ERR*wrong number of arguments*} {r segments extra}
    }

    test {A segment name made only of digits is refused (it would shadow an id)} {
        set before [r segments]
        assert_error {ERR*digits*} {r mount 1 4096 OWNER wd}
        assert_error {ERR*digits*} {r mount 0042 4096 OWNER wd}
        assert_equal $before [r segments]
        assert_equal self [dict get [r segment.info 1] name]
        set id [r mount d42x 4096 OWNER wd]
        assert_equal d42x [dict get [r segment.info $id] name]
        r unmount d42x
    }

    test {BASE is decimal unless it starts with 0x (never octal)} {
        r mount base-dec 4096 OWNER wb BASE 010
        assert_equal 10 [dict get [r segment.info base-dec] base]
        r mount base-nine 4096 OWNER wb BASE 09
        assert_equal 9 [dict get [r segment.info base-nine] base]
        r mount base-hex 4096 OWNER wb BASE 0x10
        assert_equal 16 [dict get [r segment.info base-hex] base]
        r unmount base-dec
        r unmount base-nine
        r unmount base-hex
    }

    test {MOUNT of a segment that is draining is refused until it is gone} {
        set id [r mount drain-re 4096 OWNER wr]
        assert_equal 0 [r unmount drain-re GRACEFUL 300]
        assert_error {EXISTS*unmounted*} {r mount drain-re 4096 OWNER wr}
        assert_equal draining [dict get [r segment.info drain-re] state]
        wait_for_condition 40 50 {[r segment.info drain-re] eq ""} else {
            fail "draining segment still there"
        }
        assert_morethan [r mount drain-re 4096 OWNER wr] $id
        r unmount drain-re
    }
}

start_server {tags {mooncake segments owners} overrides {segment-size 16mb owner-ttl 500}} {
    test {An owner with an open connection keeps its segment beyond owner-ttl} {
        set owners0 [get_info_field r segments owners]
        set c [redis_client]
        set id [$c mount live-1 65536 OWNER w1]
        assert_equal [expr {$owners0 + 1}] [get_info_field r segments owners]
        after 1500
        assert_equal $id [seg_field live-1 id]
        assert_equal w1 [seg_field live-1 owner]
        # The owner is alive: a HEARTBEAT (from a connection that then
        # closes, so only the mounting connection holds w1) is OK.
        set h [redis_client]
        assert_equal OK [$h heartbeat w1]
        $h close
        set ::w1_id $id
        set ::w1_client $c
        set ::owners0 $owners0
    }

    test {Closing the owner's last connection unmounts its segment after owner-ttl} {
        set t0 [clock milliseconds]
        $::w1_client close
        # Still there within owner-ttl (500 ms).
        assert_equal $::w1_id [seg_field live-1 id]
        wait_for_condition 60 50 {[r segment.info live-1] eq ""} else {
            fail "segment of a closed owner still mounted after 3 s"
        }
        assert_morethan_equal [expr {[clock milliseconds] - $t0}] 450
        assert_equal $::owners0 [get_info_field r segments owners]
        assert_equal {} [seg_info_line $::w1_id]
    }

    test {HEARTBEAT of a dead or unknown owner is -NEEDREMOUNT} {
        assert_error {NEEDREMOUNT*} {r heartbeat w1}
        assert_error {NEEDREMOUNT*} {r heartbeat never-mounted}
        # A refused HEARTBEAT creates no owner.
        assert_equal $::owners0 [get_info_field r segments owners]
    }

    test {Re-mount after an owner's death gets a new id} {
        set c [redis_client]
        set id [$c mount live-1 65536 OWNER w1]
        assert_morethan $id $::w1_id
        assert_equal OK [$c heartbeat w1]
        $c close
        wait_for_condition 60 50 {[r segment.info live-1] eq ""} else {
            fail "re-mounted segment still mounted after 3 s"
        }
    }

    test {HEARTBEAT from another connection within owner-ttl keeps the owner alive} {
        set c [redis_client]
        set id [$c mount hb-1 65536 OWNER w2]
        $c close
        set d [redis_client]
        assert_equal OK [$d heartbeat w2]
        after 1200
        assert_equal $id [seg_field hb-1 id]
        assert_equal OK [$d heartbeat w2]
        after 300
        assert_equal $id [seg_field hb-1 id]
        set t0 [clock milliseconds]
        $d close
        wait_for_condition 60 50 {[r segment.info hb-1] eq ""} else {
            fail "segment still mounted 3 s after the heartbeating connection closed"
        }
        assert_morethan_equal [expr {[clock milliseconds] - $t0}] 450
        assert_error {NEEDREMOUNT*} {r heartbeat w2}
    }

    test {MOUNT without OWNER: a per-connection default owner} {
        set c1 [redis_client]
        set c2 [redis_client]
        set id1 [$c1 mount def-1 8192]
        set id2 [$c2 mount def-2 8192]
        set o1 [seg_field def-1 owner]
        set o2 [seg_field def-2 owner]
        assert_not_equal {} $o1
        assert_not_equal {} $o2
        assert_not_equal $o1 $o2
        assert_match "*[$c1 client id]*" $o1
        assert_match "*[$c2 client id]*" $o2
        # Idempotent on the same connection, -EXISTS from another one.
        assert_equal $id1 [$c1 mount def-1 8192]
        assert_error {EXISTS*} {$c2 mount def-1 8192}
        # The default owner's segment goes when its connection goes.
        $c1 close
        wait_for_condition 60 50 {[r segment.info def-1] eq ""} else {
            fail "default-owner segment still mounted 3 s after its connection closed"
        }
        assert_equal $id2 [seg_field def-2 id]
        $c2 close
        wait_for_condition 60 50 {[r segment.info def-2] eq ""} else {
            fail "default-owner segment still mounted 3 s after its connection closed"
        }
    }

    test {CLIENT KILL of the owner's connection counts as closing} {
        set c [redis_client]
        set id [$c mount killed-1 8192 OWNER wk]
        set cid [$c client id]
        assert_equal 1 [r client kill id $cid]
        assert_error {*} {$c ping}
        catch {$c close}
        wait_for_condition 60 50 {[r segment.info killed-1] eq ""} else {
            fail "segment of a killed client still mounted after 3 s"
        }
        assert_error {NEEDREMOUNT*} {r heartbeat wk}
        set id2 [r mount killed-1 8192 OWNER wk]
        assert_morethan $id2 $id
        r unmount killed-1
    }

    test {Explicit UNMOUNT by a live owner, then the owner goes quietly} {
        set owners0 [get_info_field r segments owners]
        set c [redis_client]
        $c mount quiet-1 4096 OWNER wq
        assert_equal [expr {$owners0 + 1}] [get_info_field r segments owners]
        assert_equal 0 [$c unmount quiet-1]
        $c close
        wait_for_condition 60 50 {[get_info_field r segments owners] == $owners0} else {
            fail "owner of a closed connection still counted after 3 s"
        }
        assert_equal [list 1] [seg_ids]
    }

    test {A connection that mounts and unmounts under ever new owners holds none of them} {
        # Each cycle's owner had nothing left once its segment went, yet the
        # connection kept it alive until it closed: 2000 cycles, 2000 owners.
        set owners0 [get_info_field r segments owners]
        set heap0 [get_info_field r memory used_memory_heap]
        set c [redis_client]
        for {set i 0} {$i < 2000} {incr i} {
            $c mount cyc-$i 4096 OWNER cyc-owner-$i
            assert_equal 0 [$c unmount cyc-$i]
        }
        assert_equal $owners0 [get_info_field r segments owners]
        assert_lessthan [expr {[get_info_field r memory used_memory_heap] - $heap0}] 65536
        # An owner that still has a segment stays, and so does one whose
        # segment someone else unmounted (its HEARTBEAT stays OK).
        $c mount cyc-a 4096 OWNER cyc-keep
        $c mount cyc-b 4096 OWNER cyc-keep
        $c unmount cyc-a
        assert_equal OK [$c heartbeat cyc-keep]
        r unmount cyc-b
        assert_equal OK [$c heartbeat cyc-keep]
        assert_equal [expr {$owners0 + 1}] [get_info_field r segments owners]
        # Its own last UNMOUNT lets it go: a HEARTBEAT then asks for a MOUNT.
        $c mount cyc-c 4096 OWNER cyc-keep
        $c unmount cyc-c
        assert_equal $owners0 [get_info_field r segments owners]
        assert_error {NEEDREMOUNT*} {$c heartbeat cyc-keep}
        $c close
    }

    test {A GRACEFUL unmount of an owner's last segment by its own connection lets go of the owner} {
        # The drain ends in the cron, after the UNMOUNT replied: the owner
        # stayed attached to the connection that asked, however many cycles.
        set owners0 [get_info_field r segments owners]
        set c [redis_client]
        for {set i 0} {$i < 20} {incr i} {
            $c mount gcyc-$i 4096 OWNER gcyc-owner-$i
            assert_equal 0 [$c unmount gcyc-$i GRACEFUL 0]
        }
        wait_for_condition 200 10 {[get_info_field r segments owners] == $owners0} else {
            fail "graceful unmounts left [expr {[get_info_field r segments owners] - $owners0}] owners"
        }
        $c mount gcyc-k 4096 OWNER gcyc-keep
        $c unmount gcyc-k GRACEFUL 0
        wait_for_condition 200 10 {[catch {$c heartbeat gcyc-keep} e] && [string match NEEDREMOUNT* $e]} else {
            fail "the owner outlived its drained last segment"
        }
        # Someone else's GRACEFUL unmount leaves the owner with its connection.
        $c mount gcyc-o 4096 OWNER gcyc-other
        r unmount gcyc-o GRACEFUL 0
        wait_for_condition 200 10 {[r segment.info gcyc-o] eq {}} else { fail "the drain did not end" }
        assert_equal OK [$c heartbeat gcyc-other]
        $c close
    }

    test {With thousands of segments, MOUNT, lookups by name and id, and puts look at a few of them} {
        # Each of these walked the whole segment table: a put copied it to
        # draw from, a SEG.READ found its segment by id, a MOUNT looked for
        # its name and a free slot. 2000 segments: ~2000 visits per put.
        set c [redis_client]
        for {set i 0} {$i < 2000} {incr i} { $c mount many-$i 1048576 OWNER many-owner }
        assert_equal OK [r debug visits reset]
        for {set i 0} {$i < 200} {incr i} {
            set reps [r put.start many-key-$i 4096 REPLICAS 2]
            assert_equal 2 [llength $reps]
            r put.end many-key-$i
        }
        set puts [dict get [r debug visits] segments]
        assert_lessthan $puts [expr {200 * 64}]
        assert_equal OK [r debug visits reset]
        set id [dict get [r segment.info many-1500] id]
        for {set i 0} {$i < 100} {incr i} {
            assert_equal many-1500 [dict get [r segment.info many-1500] name]
            assert_equal many-1500 [dict get [r segment.info $id] name]
        }
        $c unmount many-7
        assert_equal {} [r segment.info many-7]
        $c mount many-7 1048576 OWNER many-owner
        assert_lessthan [dict get [r debug visits] segments] 1000
        # Names are per tenant: two tenants' same name, each finds its own.
        r acl setuser many-t1 on >p ~t1:* +@all -@dangerous
        r acl setuser many-t2 on >p ~t2:* +@all -@dangerous
        set t1 [redis_client]
        set t2 [redis_client]
        $t1 auth many-t1 p
        $t2 auth many-t2 p
        set id1 [$t1 mount many-shared-name 1048576]
        set id2 [$t2 mount many-shared-name 1048576]
        assert {$id1 != $id2}
        assert_equal $id1 [dict get [$t1 segment.info many-shared-name] id]
        assert_equal $id2 [dict get [$t2 segment.info many-shared-name] id]
        assert_equal 0 [$t1 unmount many-shared-name]
        assert_equal {} [$t1 segment.info many-shared-name]
        assert_equal $id2 [dict get [$t2 segment.info many-shared-name] id]
        assert_equal 0 [$t2 unmount many-shared-name]
        $t1 close
        $t2 close
        r acl deluser many-t1 many-t2
        for {set i 0} {$i < 2000} {incr i} { $c unmount many-$i }
        assert_equal {} [r segment.info many-1999]
        $c close
    }

    test {Drawn placement still spreads replicas over hosts: 150 segments on one host, one on another} {
        set c [redis_client]
        for {set i 0} {$i < 150} {incr i} { $c mount spread-a-$i 1048576 HOST host-a OWNER spread }
        $c mount spread-b 1048576 HOST host-b OWNER spread
        r config set allocation-strategy random
        for {set i 0} {$i < 40} {incr i} {
            set hosts {}
            foreach rep [r put.start spread-key-$i 4096 REPLICAS 2] {
                lappend hosts [dict get [r segment.info [lindex $rep 0]] host]
            }
            r put.end spread-key-$i
            assert_equal 2 [llength [lsort -unique $hosts]]
        }
        # Every host has a replica once the pool and both hosts hold one:
        # a fourth goes anywhere (the same rule as the walk).
        set reps [r put.start spread-key-x 4096 REPLICAS 4]
        assert_equal 4 [llength $reps]
        r put.end spread-key-x
        for {set i 0} {$i < 150} {incr i} { $c unmount spread-a-$i }
        $c unmount spread-b
        $c close
    }
}

start_server {tags {mooncake segments}} {
    test {max-segments: a MOUNT of a new name past it is -LIMIT and changes nothing; a remount is no new one} {
        assert_equal {max-segments 65535} [r config get max-segments]
        assert_error {ERR*} {r config set max-segments 0}
        assert_error {ERR*} {r config set max-segments 65536}
        set base [llength [r segments]] ;# the pool, at least
        r mount ms-0 1mb OWNER ms
        r mount ms-1 1mb OWNER ms
        assert_equal OK [r config set max-segments [expr {$base + 2}]]
        set before [r segments]
        assert_error {LIMIT*max-segments*unmount some first*} {r mount ms-2 1mb OWNER ms}
        assert_equal $before [r segments]
        assert_equal {} [r segment.info ms-2]
        # A remount of a mounted name is the same segment.
        assert_equal [dict get [r segment.info ms-1] id] [r mount ms-1 1mb OWNER ms]
        # Lowering it unmounts nothing; an unmount makes room again.
        assert_equal OK [r config set max-segments 1]
        assert_equal $before [r segments]
        assert_equal OK [r config set max-segments [expr {$base + 2}]]
        assert_equal 0 [r unmount ms-0]
        r mount ms-2 1mb OWNER ms
        assert_equal ms-2 [dict get [r segment.info ms-2] name]
        r config set max-segments 65535
        r unmount ms-1
        r unmount ms-2
    }
}
