#!/bin/bash
# dracut module: the tinybox state partition, set up in the initrd.

check() { return 0; }

depends() { echo systemd systemd-veritysetup dm; }

installkernel() { hostonly='' instmods dm-verity erofs overlay ext4 loop; }

install() {
    inst_multiple systemd-repart mkfs.ext4 mke2fs findmnt readlink basename mount mkdir sleep udevadm head ls cat
    inst_simple /etc/mke2fs.conf
    inst_script "$moddir/tinybox-state.sh" /usr/lib/tinybox/tinybox-state
    inst_simple "$moddir/tinybox-state.service" "$systemdsystemunitdir/tinybox-state.service"
    mkdir -p "$initdir$systemdsystemunitdir/initrd-root-fs.target.wants"
    ln_r "$systemdsystemunitdir/tinybox-state.service" \
        "$systemdsystemunitdir/initrd-root-fs.target.wants/tinybox-state.service"
}
